package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/tests/cluster"
	"github.com/confighash/confighash/tests/fixtures"
)

// The fake nodes here complete a Job's pods at once, as a Job whose pods ran and
// finished. One whose pods no node may take stays running until it is deleted.

func createJob(t testing.TB, c *cluster.Cluster, ns string, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	created, err := c.Client.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func getJob(t testing.TB, c *cluster.Cluster, ns, name string) *batchv1.Job {
	t.Helper()
	job, err := c.Client.BatchV1().Jobs(ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// runningJob is a Job that runs until it is deleted: no node may take its pods.
func runningJob(name string, annotations map[string]string, tmpl corev1.PodTemplateSpec) *batchv1.Job {
	job := fixtures.Job(name, annotations, tmpl)
	job.Spec.Template.Spec.NodeSelector = map[string]string{"confighash.dev/no-such-node": "true"}
	return job
}

func waitJobFinished(t testing.TB, c *cluster.Cluster, ns, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, "Job "+name+" to complete", func() bool {
		job := getJob(t, c, ns, name)
		return job != nil && job.Status.CompletionTime != nil
	})
}

// waitRecreated waits until the Job of that name is another than the one with UID
// before, as Reloader's suite checks a recreation, and returns it.
func waitRecreated(t testing.TB, c *cluster.Cluster, ns, name string, before types.UID, timeout time.Duration) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	waitFor(t, timeout, "Job "+name+" to be recreated", func() bool {
		job = getJob(t, c, ns, name)
		return job != nil && job.UID != before
	})
	return job
}

// expectRecreatedOnce checks the Job is the one recreated from the Job with UID from,
// the one recreation of that change, hashed from the data as it is now, and that its
// record is gone.
func expectRecreatedOnce(t testing.TB, c *cluster.Cluster, ns, name string, from types.UID, want *batchv1.Job) {
	t.Helper()
	job := getJob(t, c, ns, name)
	switch {
	case job == nil:
		t.Fatalf("Job %s is gone", name)
	case job.UID != want.UID:
		t.Fatalf("Job %s was recreated again (UID %s, then %s) for one change", name, want.UID, job.UID)
	case job.Annotations[confighash.AnnotationRecreatedFrom] != string(from):
		t.Fatalf("Job %s was recreated from %q, want from %s", name, job.Annotations[confighash.AnnotationRecreatedFrom], from)
	}
	if got, want := job.Spec.Template.Annotations[confighash.AnnotationHash], expectedHash(t, c, hashKey(t, c), ns, job.Annotations, &job.Spec.Template); got != want {
		t.Fatalf("the new Job's hash is %q, want %q: that of the data as it is now", got, want)
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), confighash.RecreationName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the record of the recreation is still there (%v)", err)
	}
}

// TestAJobIsRecreatedOncePerChange: a running Job that uses a ConfigMap is hashed at
// its creation; each change of the ConfigMap recreates it once, under the same name,
// its spec kept, its new pods reading the new data.
func TestAJobIsRecreatedOncePerChange(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	job := createJob(t, c, ns, runningJob("batch", map[string]string{confighash.ReloaderConfigMapReload: "cfg"}, fixtures.EnvFromTemplate("cfg")))
	if job.Spec.Template.Annotations[confighash.AnnotationHash] == "" {
		t.Fatal("the Job was not hashed at its creation")
	}
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	for i := 1; i <= 2; i++ {
		setKey(t, c, ns, ref, "k", fmt.Sprint(i))
		now := waitRecreated(t, c, ns, "batch", job.UID, 30*time.Second)
		waitQuiet(t, w)
		expectRecreatedOnce(t, c, ns, "batch", job.UID, now)
		if len(now.Spec.Template.Spec.Containers[0].EnvFrom) != 1 || now.Spec.Parallelism == nil || *now.Spec.Parallelism != *job.Spec.Parallelism {
			t.Fatalf("the recreated Job's spec differs: %+v", now.Spec)
		}
		job = now
	}
	if got := w.metric(t, `confighash_watcher_touches_total{result="recreated"}`); got != 2 {
		t.Fatalf("%v recreations counted, want 2", got)
	}
	// A change of the Job's metadata is admitted as it is: the webhook writes nothing
	// into a Job's template after its creation. A patch, as kubectl label makes: the
	// Job controller writes the Job's status meanwhile.
	label := []byte(`{"metadata":{"labels":{"team":"batch"}}}`)
	if _, err := c.Client.BatchV1().Jobs(ns).Patch(t.Context(), job.Name, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatalf("a label change of the Job was refused: %v", err)
	}
}

// denyWhile makes the API server refuse the operation on the resource in the
// namespace while its CEL expression does not hold, until the returned func lifts it;
// probe reports whether it is in force.
func denyWhile(t testing.TB, c *cluster.Cluster, ns, group, resource string, op admissionregistrationv1.OperationType, expression string, probe func() bool) (lift func()) {
	t.Helper()
	name := "deny-" + ns
	inNamespace := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	policies := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	_, err := policies.Create(t.Context(), &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: inNamespace,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{op},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: "denied by the test"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(t.Context(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: inNamespace},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remove := func() {
		// Also at cleanup, once the test's context is done.
		_ = bindings.Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = policies.Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(remove)
	waitFor(t, 30*time.Second, "the test's policy to be in force", probe)
	return func() {
		remove()
		waitFor(t, 30*time.Second, "the test's policy to be lifted", func() bool { return !probe() })
	}
}

// TestAJobRecreationStoppedInTheMiddleIsFinishedOnce: a watcher killed after it
// deleted the Job and before it made the new one, or after it made it and before it
// deleted its record, leaves the recreation to the next, which finishes it: one new
// Job, never none and never two.
func TestAJobRecreationStoppedInTheMiddleIsFinishedOnce(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	recreated := `!('` + confighash.AnnotationRecreatedFrom + `' in object.metadata.?annotations.orValue({}))`
	record := `oldObject.type != '` + confighash.RecreationType + `'`
	// Dry runs tell whether a test policy is in force, and change nothing.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probeJob := fixtures.Job("probe", map[string]string{confighash.AnnotationRecreatedFrom: "x"}, fixtures.PlainTemplate())
	jobCreateDenied := func() bool {
		_, err := c.Client.BatchV1().Jobs(ns).Create(t.Context(), probeJob, dryRun)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}
	probeRecord := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Type: confighash.RecreationType}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(t.Context(), probeRecord, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recordDeleteDenied := func() bool {
		err := c.Client.CoreV1().Secrets(ns).Delete(t.Context(), "probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}
	recordExists := func() bool {
		_, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), confighash.RecreationName("batch"), metav1.GetOptions{})
		return err == nil
	}

	job := createJob(t, c, ns, runningJob("batch", map[string]string{confighash.ReloaderConfigMapReload: "cfg"}, fixtures.EnvFromTemplate("cfg")))
	steps := []struct {
		name            string
		group, resource string
		op              admissionregistrationv1.OperationType
		expression      string
		probe           func() bool
		stoppedWith     string
		stopped         func(now *batchv1.Job) bool
	}{
		{"after the delete, before the new Job", "batch", "jobs", admissionregistrationv1.Create, recreated, jobCreateDenied,
			"no Job and the record", func(now *batchv1.Job) bool { return now == nil && recordExists() }},
		{"after the new Job, before the record's delete", "", "secrets", admissionregistrationv1.Delete, record, recordDeleteDenied,
			"the new Job and the record", func(now *batchv1.Job) bool { return now != nil && now.UID != job.UID && recordExists() }},
	}
	for i, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			w := startWatcher(t, c, fastLease...)
			lift := denyWhile(t, c, ns, step.group, step.resource, step.op, step.expression, step.probe)
			setKey(t, c, ns, ref, "k", fmt.Sprint(i+1))
			var stoppedAt *batchv1.Job
			waitFor(t, 30*time.Second, "the recreation to stop at "+step.stoppedWith, func() bool {
				stoppedAt = getJob(t, c, ns, "batch")
				return step.stopped(stoppedAt)
			})
			w.kill()
			lift()
			w = startWatcher(t, c, fastLease...)
			now := waitRecreated(t, c, ns, "batch", job.UID, 30*time.Second)
			waitFor(t, 30*time.Second, "the record to be deleted", func() bool { return !recordExists() })
			waitQuiet(t, w)
			if stoppedAt != nil && now.UID != stoppedAt.UID {
				t.Fatalf("the Job made before the watcher was killed (%s) was made again (%s)", stoppedAt.UID, now.UID)
			}
			expectRecreatedOnce(t, c, ns, "batch", job.UID, now)
			w.stop(t)
			job = now
		})
	}
}

// TestAFinishedOrOwnedJobIsLeftAlone: by default a Job that has finished is not
// recreated, and says why in an Event, until it asks to be; a Job a CronJob made is
// never recreated: the CronJob's next one reads the new data.
func TestAFinishedOrOwnedJobIsLeftAlone(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	optIn := map[string]string{confighash.ReloaderAuto: "true"}
	running := createJob(t, c, ns, runningJob("running", optIn, fixtures.EnvFromTemplate("cfg")))
	done := createJob(t, c, ns, fixtures.Job("done", optIn, fixtures.EnvFromTemplate("cfg")))
	cron := fixtures.CronJob("nightly", fixtures.EnvFromTemplate("cfg"))
	cron.Spec.Suspend = ptr.To(true)
	cronJob, err := c.Client.BatchV1().CronJobs(ns).Create(t.Context(), cron, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ownedJob := runningJob("nightly-1", optIn, fixtures.EnvFromTemplate("cfg"))
	ownedJob.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(cronJob, batchv1.SchemeGroupVersion.WithKind("CronJob"))}
	owned := createJob(t, c, ns, ownedJob)
	waitJobFinished(t, c, ns, "done")

	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}
	setKey(t, c, ns, ref, "k", "1")
	running = waitRecreated(t, c, ns, "running", running.UID, 30*time.Second)
	waitQuiet(t, w)
	for _, j := range []*batchv1.Job{done, owned} {
		if now := getJob(t, c, ns, j.Name); now == nil || now.UID != j.UID {
			t.Fatalf("Job %s was recreated", j.Name)
		}
	}
	waitFor(t, 10*time.Second, "an Event that says the finished Job is left alone", func() bool {
		events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=done,reason=NotRecreated"})
		return err == nil && len(events.Items) == 1
	})

	// Asked to, the finished Job is recreated at the next change.
	mergeAnnotations(t, c, ns, "Job", "done", map[string]*string{confighash.AnnotationRecreateFinished: ptrTo("true")})
	setKey(t, c, ns, ref, "k", "2")
	now := waitRecreated(t, c, ns, "done", done.UID, 30*time.Second)
	waitRecreated(t, c, ns, "running", running.UID, 30*time.Second)
	waitQuiet(t, w)
	expectRecreatedOnce(t, c, ns, "done", done.UID, now)
	if now := getJob(t, c, ns, owned.Name); now == nil || now.UID != owned.UID {
		t.Fatal("the CronJob's Job was recreated")
	}
}

// TestAForgedRecreationRecordMakesNoJob: whoever may write Secrets in a namespace, but
// not Jobs, cannot have the watcher make a Job by writing a record of a recreation:
// one the hash key did not seal is left alone.
func TestAForgedRecreationRecordMakesNoJob(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := labeledNamespace(t, c)
	forged := fixtures.Job("miner", nil, fixtures.PlainTemplate())
	forged.Namespace = ns
	body, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	rec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName("miner"), Labels: map[string]string{confighash.LabelRecreationOf: "miner"},
			Annotations: map[string]string{confighash.AnnotationReplaces: "0000", confighash.AnnotationSeal: strings.Repeat("0", 64)}},
		Type: confighash.RecreationType, Immutable: ptr.To(true), Data: map[string][]byte{confighash.RecreationJobKey: body},
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(t.Context(), rec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, c)
	waitQuiet(t, w)
	time.Sleep(2 * time.Second) // a retry, had there been one
	if job := getJob(t, c, ns, "miner"); job != nil {
		t.Fatal("the watcher made the Job of a forged record")
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), rec.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the forged record is gone (%v): it is not the watcher's to delete", err)
	}
}

// TestAStaleCopyOfARecreationRecordMakesNoJob (issue 41): a namespace user can read
// the records of their namespace; one saved from a recreation and made again two hours
// later, sealed with the key as the watcher sealed it, is deleted with a StaleRecord
// Event and no Job is made from it: the watcher made its Job again.
func TestAStaleCopyOfARecreationRecordMakesNoJob(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	key := hashKey(t, c)
	ns := labeledNamespace(t, c)
	saved := fixtures.Job("report", nil, fixtures.PlainTemplate())
	saved.Namespace = ns
	body, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	const replaced = "0f0e0d0c-0b0a-0908-0706-050403020100"
	recordSeal := confighash.RecreationSeal(key, ns, "report", replaced, body)
	annotations := confighash.SealedAt(key, recordSeal, time.Now().Add(-2*time.Hour))
	annotations[confighash.AnnotationReplaces] = replaced
	annotations[confighash.AnnotationSeal] = recordSeal
	rec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: confighash.RecreationName("report"), Labels: map[string]string{confighash.LabelRecreationOf: "report"}, Annotations: annotations},
		Type:       confighash.RecreationType, Immutable: ptr.To(true), Data: map[string][]byte{confighash.RecreationJobKey: body},
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(t.Context(), rec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startWatcher(t, c)
	waitFor(t, 30*time.Second, "the stale record to be deleted", func() bool {
		_, err := c.Client.CoreV1().Secrets(ns).Get(t.Context(), rec.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if job := getJob(t, c, ns, "report"); job != nil {
		t.Fatal("the watcher made the Job of a stale record")
	}
	events, err := c.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=StaleRecord,type=Warning"})
	if err != nil || len(events.Items) != 1 {
		t.Fatalf("StaleRecord Events: %d (%v), want one", len(events.Items), err)
	}
}

// startedByHand lists the Jobs of the CronJob that were started by hand, as
// Reloader's suite finds them: owned by it, annotated cronjob.kubernetes.io/instantiate.
func startedByHand(ctx context.Context, c *cluster.Cluster, ns, cronJob string) ([]batchv1.Job, error) {
	jobs, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(jobs.Items, func(j batchv1.Job) bool {
		ref := metav1.GetControllerOf(&j)
		_, instantiated := j.Annotations["cronjob.kubernetes.io/instantiate"]
		return ref == nil || ref.Kind != "CronJob" || ref.Name != cronJob || !instantiated
	}), nil
}

// cronJobRuns returns the Jobs started by hand for the CronJob as kubectl starts them
// (instantiate: manual), by name.
func cronJobRuns(t testing.TB, c *cluster.Cluster, ns, cronJob string) map[string]*batchv1.Job {
	t.Helper()
	jobs, err := startedByHand(t.Context(), c, ns, cronJob)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]*batchv1.Job{}
	for i, j := range jobs {
		if j.Annotations["cronjob.kubernetes.io/instantiate"] == "manual" {
			runs[j.Name] = &jobs[i]
		}
	}
	return runs
}

// runsAndWaits makes a namespace with ConfigMap "cfg" and two CronJobs that use it:
// "runs", which runs on change, and "waits", which waits for its next run.
func runsAndWaits(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ns := labeledNamespace(t, c)
	createConfigMap(t, c, ns, "cfg", map[string]string{"k": "0"})
	runs := fixtures.CronJob("runs", fixtures.EnvFromTemplate("cfg"))
	runs.Annotations[confighash.AnnotationRunOnChange] = "true"
	for _, cj := range []*batchv1.CronJob{runs, fixtures.CronJob("waits", fixtures.EnvFromTemplate("cfg"))} {
		if _, err := c.Client.BatchV1().CronJobs(ns).Create(t.Context(), cj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// TestACronJobRunsOnChangeOncePerChange: a CronJob annotated run-on-change starts one
// Job with the new data for each change, as Reloader does, also when the watcher is
// killed before it started it; one without the annotation waits for its next run.
func TestACronJobRunsOnChangeOncePerChange(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	ns := runsAndWaits(t, c)
	hashOf := func(name string) string {
		cj, err := c.Client.BatchV1().CronJobs(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cj.Spec.JobTemplate.Spec.Template.Annotations[confighash.AnnotationHash]
	}
	expectRun := func(t *testing.T, w *component, want int, before string) {
		t.Helper()
		waitFor(t, 30*time.Second, "the CronJob to roll", func() bool { return hashOf("runs") != before })
		hash := hashOf("runs")
		waitFor(t, 30*time.Second, "the CronJob's Job for the new data", func() bool { return cronJobRuns(t, c, ns, "runs")[confighash.RunName("runs", hash)] != nil })
		waitQuiet(t, w)
		got := cronJobRuns(t, c, ns, "runs")
		run := got[confighash.RunName("runs", hash)]
		if len(got) != want || run.Spec.Template.Annotations[confighash.AnnotationHash] != hash {
			t.Fatalf("%d Jobs started, want %d; the last with hash %q, want %q", len(got), want, run.Spec.Template.Annotations[confighash.AnnotationHash], hash)
		}
		if n := len(cronJobRuns(t, c, ns, "waits")); n != 0 {
			t.Fatalf("the CronJob that waits for its next run started %d Jobs", n)
		}
	}
	ref := confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}

	t.Run("one change, one Job", func(t *testing.T) {
		w := startWatcher(t, c)
		before := hashOf("runs")
		setKey(t, c, ns, ref, "k", "1")
		expectRun(t, w, 1, before)
		w.stop(t)
	})
	t.Run("a watcher killed before it started the Job", func(t *testing.T) {
		w := startWatcher(t, c, fastLease...)
		probe := fixtures.Job("probe", map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}, fixtures.PlainTemplate())
		lift := denyWhile(t, c, ns, "batch", "jobs", admissionregistrationv1.Create, `object.metadata.?annotations.orValue({})[?'cronjob.kubernetes.io/instantiate'].orValue('') != 'manual'`, func() bool {
			_, err := c.Client.BatchV1().Jobs(ns).Create(t.Context(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
		})
		before := hashOf("runs")
		setKey(t, c, ns, ref, "k", "2")
		waitFor(t, 30*time.Second, "the CronJob to roll", func() bool { return hashOf("runs") != before })
		w.kill()
		lift()
		w = startWatcher(t, c, fastLease...)
		expectRun(t, w, 2, before)
	})
}

// TestARunDueMarkStartsAJobOnlyWhereTheCronJobRunsOnChange (issue 41): anyone who may
// annotate a CronJob can write confighash.dev/run-due. On a CronJob that does not run
// on change, or with the hash of other data than its template's, the mark is removed
// and no Job starts: the watcher started one under its own name for any mark.
func TestARunDueMarkStartsAJobOnlyWhereTheCronJobRunsOnChange(t *testing.T) {
	c := sharedCluster(t)
	startWebhook(t, c)
	w := startWatcher(t, c)
	ns := runsAndWaits(t, c)
	for name, mark := range map[string]string{"waits": "true", "runs": "v1:" + strings.Repeat("0", 64)} {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, confighash.AnnotationRunDue, mark)
		if _, err := c.Client.BatchV1().CronJobs(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the marks to be removed", func() bool {
		for _, name := range []string{"runs", "waits"} {
			cj, err := c.Client.BatchV1().CronJobs(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil || cj.Annotations[confighash.AnnotationRunDue] != "" {
				return false
			}
		}
		return true
	})
	waitQuiet(t, w)
	for _, name := range []string{"runs", "waits"} {
		if n := len(cronJobRuns(t, c, ns, name)); n != 0 {
			t.Errorf("a forged mark started %d Jobs of CronJob %s", n, name)
		}
	}
	// The watcher's own mark still starts one.
	setKey(t, c, ns, confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, "k", "1")
	waitFor(t, 30*time.Second, "the CronJob that runs on change to start its Job", func() bool { return len(cronJobRuns(t, c, ns, "runs")) == 1 })
}
