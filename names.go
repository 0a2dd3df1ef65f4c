// Package confighash is the domain of confighash, free of I/O: which ConfigMaps and
// Secrets a workload's pod template uses, which of them count under the workload's
// annotations, the keyed hash of their contents, and the sources record that decides
// when a change is due to roll the workload.
//
// It takes Kubernetes objects and returns decisions; the webhook and the watcher adapt
// it to the API server.
package confighash

// Domain is the prefix of every annotation and label confighash reads or writes.
const Domain = "confighash.dev"

// Labels and annotations, as documented in docs/annotations.md.
const (
	// InjectionLabel on a Namespace enables confighash there: with InjectionEnabled for
	// the workloads that opt in, with InjectionEvery for every workload that does not
	// opt out (see Policy.ForEveryWorkload).
	InjectionLabel   = Domain + "/injection"
	InjectionEnabled = "enabled"
	InjectionEvery   = "all"

	// AnnotationInject opts a workload in, on its metadata or its pod template.
	AnnotationInject = Domain + "/inject"
	// AnnotationOnly restricts discovery to "configmaps" or "secrets".
	AnnotationOnly = Domain + "/only"
	// AnnotationIncludeConfigMaps and AnnotationIncludeSecrets name objects to hash even
	// when the pod template does not use them; either opts the workload in by itself.
	AnnotationIncludeConfigMaps = Domain + "/include-configmaps"
	AnnotationIncludeSecrets    = Domain + "/include-secrets"
	// AnnotationExcludeConfigMaps and AnnotationExcludeSecrets name objects never to hash.
	AnnotationExcludeConfigMaps = Domain + "/exclude-configmaps"
	AnnotationExcludeSecrets    = Domain + "/exclude-secrets"
	// AnnotationSearch makes only sources that carry AnnotationMatch count.
	AnnotationSearch = Domain + "/search"
	// AnnotationPausePeriod holds further touches of a workload for this duration
	// after one, so that the changes made meanwhile roll it once.
	AnnotationPausePeriod = Domain + "/pause-period"
	// AnnotationRolloutWindow, on a workload or a Namespace, says when its
	// configuration changes may roll (see Windows).
	AnnotationRolloutWindow = Domain + "/rollout-window"
	// AnnotationWaveSize, on a workload or a source, rolls a change that reaches many
	// workloads in waves of at most this many (see Pacing).
	AnnotationWaveSize = Domain + "/wave-size"

	// AnnotationMatch on a ConfigMap or Secret makes it count for workloads in search mode.
	AnnotationMatch = Domain + "/match"
	// AnnotationIgnore on a ConfigMap or Secret keeps it out of every hash.
	AnnotationIgnore = Domain + "/ignore"

	// AnnotationHash is written on the pod template: the only thing that makes pods roll.
	AnnotationHash = Domain + "/hash"
	// AnnotationSources is written on the workload's metadata: the sources record.
	AnnotationSources = Domain + "/sources"
	// AnnotationAdopted is written on the metadata of a running workload confighash
	// adopted without rolling it: the hash of the data its pods already have, which its
	// pod template does not carry. See Settled.
	AnnotationAdopted = Domain + "/adopted"
	// AnnotationTrigger is written by the watcher on the workload's metadata when it
	// touches the workload: the source change that triggered it (see Trigger).
	AnnotationTrigger = Domain + "/trigger"
	// AnnotationRelease is written by the watcher on a gated workload's metadata: the
	// hash it may now roll to (see Pacing). Until then a write of the workload that
	// leaves its pod template as it is keeps its hash.
	AnnotationRelease = Domain + "/release"
	// AnnotationHeld is written by the watcher on the workloads a halted wave holds: the
	// source change that halted, kind/name@resourceVersion. Removing it resumes the
	// workload's rollout; the next change of that source does too.
	AnnotationHeld = Domain + "/held"
	// AnnotationFailed is written by the watcher on a workload whose rollout of a
	// source change failed and halted its wave: that change, as in AnnotationHeld.
	AnnotationFailed = Domain + "/failed"
	// AnnotationStatus is written by the watcher on a workload's metadata: what it
	// last decided for it, why and until when (see Status).
	AnnotationStatus = Domain + "/status"
	// AnnotationPin on a workload, "true", pins it: each version of a counted source
	// it rolls out with is kept as an immutable snapshot its pod template names (see
	// Pins).
	AnnotationPin = Domain + "/pin"
	// AnnotationPinned is written on a pinned workload's pod template: the snapshot it
	// names for each source, as the source's digest.
	AnnotationPinned = Domain + "/pinned"
	// AnnotationRemakeSnapshots is written by the watcher on a pinned workload whose
	// template names a snapshot that is gone (deleted by the garbage collector before
	// the workload owned it); the webhook makes again those whose source still holds
	// their data, and removes it.
	AnnotationRemakeSnapshots = Domain + "/remake-snapshots"
	// AnnotationNotPinned is written by the webhook on a pinned workload it admitted
	// unpinned, its namespace's snapshots being at their cap: why. The watcher tells it
	// in an Event; the next admission that pins removes it.
	AnnotationNotPinned = Domain + "/not-pinned"
	// LabelSnapshotOf is on every snapshot: the source it is a copy of (SnapshotOf its
	// name); the annotation of the same name holds the name whole.
	LabelSnapshotOf = Domain + "/snapshot-of"
)
