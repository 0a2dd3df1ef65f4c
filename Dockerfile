# syntax=docker/dockerfile:1
# One image for both subcommands: `confighash webhook` and `confighash watcher`.
# The binary is the one `make build` produces: static (CGO off), trimmed, version
# stamped.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION}

# distroless/static: no shell, no package manager; runs as the nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/confighash /confighash
USER 65532:65532
ENTRYPOINT ["/confighash"]
