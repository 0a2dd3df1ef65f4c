# syntax=docker/dockerfile:1
# A static binary on a distroless base: no shell, no package manager, non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/confighash ./cmd/confighash

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/confighash /confighash
USER 65532:65532
ENTRYPOINT ["/confighash"]
