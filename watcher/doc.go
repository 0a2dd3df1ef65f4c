// Package watcher sees ConfigMap and Secret data change and touches the workloads that
// use it, so that the webhook recomputes their hash at re-admission.
package watcher
