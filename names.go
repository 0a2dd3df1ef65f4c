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
	// AnnotationOnFailure, on a workload, a source or a Namespace, says what a failed
	// rollout of a change does to the workloads its wave reached: "halt" the wave (the
	// default), or "revert" the pinned ones to the revision they ran before the change.
	AnnotationOnFailure = Domain + "/on-failure"
	// AnnotationCanary, on a workload, a source or a Namespace, sizes the first wave of
	// a change that rolls in waves: a number of workloads ("1") or a percent of the
	// source's users ("10%"), at least one (see Canary).
	AnnotationCanary = Domain + "/canary"
	// AnnotationBake, on a workload, a source or a Namespace, is how long the first
	// wave of a change must stay healthy once rolled out before the next wave rolls
	// ("5m"): no container restarts, no pod loses its readiness, none crash-loops.
	AnnotationBake = Domain + "/bake"
	// AnnotationAnalysis, on a workload, a source or a Namespace, gates a bake on a
	// metric: a query the install names, a comparison and a number ("error-ratio <
	// 0.05"), which must hold while the first wave bakes (see Analysis).
	AnnotationAnalysis = Domain + "/analysis"

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
	// AnnotationFlapping is written by the watcher on a workload it holds because the
	// sources whose change is due keep changing: those sources, as triggers, at the change
	// that tripped the breaker. While it is there every admission keeps the workload's
	// hash, and a new leader holds it on; removing it rolls the workload once, with the
	// latest data (confighash resume).
	AnnotationFlapping = Domain + "/flapping"
	// AnnotationReverted is written by the watcher on a workload it rolled back to the
	// revision it ran before a change whose rollout failed, in the write that rolls it
	// back: that change, and the hash that failed (see Marker).
	AnnotationReverted = Domain + "/reverted"
	// AnnotationBaking is written by the watcher on each workload of a change's first
	// wave, in the write that releases it: the change, the hash it rolls to and the
	// bake; then, once rolled out, from when it bakes (see Baking). A new leader
	// continues the bake from it.
	AnnotationBaking = Domain + "/baking"
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

// A Job's pod template cannot change once it is made, so a change of what it uses
// recreates it: the watcher deletes it and makes it again, the same spec under the
// same name, and the webhook hashes the new one at its creation. The watcher writes
// down each recreation first, in a Secret in the Job's namespace, so that one it was
// stopped in the middle of is finished, never done twice.
const (
	// AnnotationRecreatedFrom is on a Job the watcher made in place of another: the
	// UID of that one.
	AnnotationRecreatedFrom = Domain + "/recreated-from"
	// AnnotationRecreateFinished, "true" on a Job, recreates it even once it has
	// finished (Complete or Failed); by default a finished Job is left alone.
	AnnotationRecreateFinished = Domain + "/recreate-finished"
	// LabelRecreationOf is on the record of a recreation under way: the Job's name.
	// AnnotationReplaces on it holds the UID of the Job it replaces.
	LabelRecreationOf  = Domain + "/recreation-of"
	AnnotationReplaces = Domain + "/replaces"
	// RecreationType is the type of a recreation's record, a Secret: a Job's spec
	// may hold values as secret as those it reads.
	RecreationType = Domain + "/recreation"
	// RecreationJobKey holds the new Job, as JSON, in the record.
	RecreationJobKey = "job"
)

// A CronJob whose data changed gets the new data at its next run; one annotated
// AnnotationRunOnChange "true" (or all, with the watcher's --run-cronjobs-on-change)
// also starts a Job at once, as Reloader does. The watcher's touch that rolls it marks
// it AnnotationRunDue, and the mark is removed once the Job, named after the CronJob
// and its new hash, exists: a Job is started once per change, also when the watcher
// stops in between.
const (
	AnnotationRunOnChange = Domain + "/run-on-change"
	AnnotationRunDue      = Domain + "/run-due"
)

// AnnotationSealedAt is when the watcher sealed a recreation's record, and
// AnnotationSealedAtSeal a seal over that time and the record's own seal (see
// RecordFresh).
const (
	AnnotationSealedAt     = Domain + "/sealed-at"
	AnnotationSealedAtSeal = Domain + "/sealed-at-seal"
)

// stakater/Reloader's annotations, read as aliases of confighash's own when
// Vocabulary.Reloader is set, so that workloads annotated for Reloader keep working
// unchanged. docs/migrating-from-reloader.md maps each one.
const (
	// ReloaderAuto "true" opts in like AnnotationInject; "false" opts out, winning
	// over every opt-in of either vocabulary.
	ReloaderAuto = "reloader.stakater.com/auto"
	// ReloaderConfigMapAuto and ReloaderSecretAuto opt in for one kind of source.
	ReloaderConfigMapAuto = "configmap.reloader.stakater.com/auto"
	ReloaderSecretAuto    = "secret.reloader.stakater.com/auto"
	// ReloaderConfigMapReload and ReloaderSecretReload name sources to hash, used or
	// not: each entry is a regular expression matched against whole names.
	ReloaderConfigMapReload = "configmap.reloader.stakater.com/reload"
	ReloaderSecretReload    = "secret.reloader.stakater.com/reload"
	// ReloaderConfigMapExclude and ReloaderSecretExclude name sources never to hash.
	ReloaderConfigMapExclude = "configmaps.exclude.reloader.stakater.com/reload"
	ReloaderSecretExclude    = "secrets.exclude.reloader.stakater.com/reload"
	// ReloaderSecretProviderClassExclude names SecretProviderClasses never to hash.
	ReloaderSecretProviderClassExclude = "secretproviderclasses.exclude.reloader.stakater.com/reload"
	// ReloaderSearch opts in, counting only used sources that carry ReloaderMatch.
	ReloaderSearch = "reloader.stakater.com/search"
	// ReloaderMatch and ReloaderIgnore on a source: AnnotationMatch and AnnotationIgnore.
	ReloaderMatch  = "reloader.stakater.com/match"
	ReloaderIgnore = "reloader.stakater.com/ignore"
	// ReloaderPausePeriod is AnnotationPausePeriod.
	ReloaderPausePeriod = "deployment.reloader.stakater.com/pause-period"
	// ReloaderRolloutStrategy "restart" on an Argo Rollout has its pods restarted for
	// a change (spec.restartAt) rather than rolled (Policy.RolloutRestart).
	ReloaderRolloutStrategy = "reloader.stakater.com/rollout-strategy"
	// ReloaderPausedAt marks a Deployment paused for its pause period, Reloader's way
	// (the watcher's --pause-deployments): when, in RFC 3339.
	ReloaderPausedAt = "deployment.reloader.stakater.com/paused-at"
	// ReloaderSecretProviderClassAuto and ReloaderSecretProviderClassReload are the
	// typed auto and the named list of Secrets Store CSI SecretProviderClasses; they
	// count when Vocabulary.CSI is set.
	ReloaderSecretProviderClassAuto   = "secretproviderclass.reloader.stakater.com/auto"
	ReloaderSecretProviderClassReload = "secretproviderclass.reloader.stakater.com/reload"
)

// Restart in place's names (see RestartMode).
const (
	// AnnotationRestart, on a workload, its pod template or a pod, says how a change of
	// its data reaches its pods (see RestartMode).
	AnnotationRestart = Domain + "/restart"
	// AnnotationRestartedHash is written by the watcher on an Argo Rollout whose pods
	// it restarts (Policy.RolloutRestart), with spec.restartAt: the hash of the data
	// they were restarted for, and the hash of the pod template they were restarted
	// from (RestartedMark); a later template rolls them and makes the mark stale.
	AnnotationRestartedHash = Domain + "/restarted-hash"
	// AnnotationRestartToken is written on a pod restarted in place: the hash of the
	// data its containers are to start with. A change of it restarts them.
	AnnotationRestartToken = Domain + "/restart-token"
	// AnnotationRestartNudge is written by the watcher on a pod whose restart (or
	// reload) has not begun a few seconds after its token: a copy of the token, which changes the pod
	// and so has the kubelet look at it again. Now and then the kubelet misses a pod's
	// update in its downward API volume until its periodic sync of the pod, a minute
	// by default (kubernetes/kubernetes#59813).
	AnnotationRestartNudge = Domain + "/restart-nudge"

	// RestarterName names the restarter's container and its volume in a pod.
	RestarterName = "confighash-restarter"
	// RestarterExitCode is the code the restarter exits with to restart its pod's
	// containers: one no shell, signal or Go runtime exit gives.
	RestarterExitCode = 86
	// RestarterTokenDir is where the restarter reads the token, as RestarterTokenFile.
	RestarterTokenDir  = "/var/run/confighash"
	RestarterTokenFile = RestarterTokenDir + "/token"
)

// AnnotationSeal is on every object confighash makes that it later acts on: a
// snapshot the webhook makes (SnapshotSeal of its kind, namespace and name) and the
// record of a Job's recreation (RecreationSeal). Only a holder of the hash key can
// write one, and it holds for that object alone, so the watcher deletes no object it
// cannot prove confighash made: not a ConfigMap a user labelled as a snapshot, nor one
// restored from a snapshot's YAML under another name or in another namespace; and it
// makes no Job from a record it did not write.
const AnnotationSeal = Domain + "/seal"
