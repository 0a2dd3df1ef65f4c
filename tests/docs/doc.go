// Package docs keeps the documentation in step with the code: its test fails when a
// flag, an annotation or label, a metric or an Event reason is in the code and not in
// docs/, or named in docs/ and not in the code. It reads the Go source and the
// binary's --help, and needs no cluster.
package docs
