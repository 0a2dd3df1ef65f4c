// Package webhook is the mutating admission webhook: at every create and update of an
// opted-in workload it writes the keyed hash of the ConfigMaps and Secrets the pod
// template uses, so the workload rolls exactly when that data changes.
package webhook
