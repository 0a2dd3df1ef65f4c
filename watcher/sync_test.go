package watcher

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// TestAChangeOfAUsedConfigMapTouchesEachUserOnce (rule 1): each workload that uses the
// ConfigMap, however its pods read it, is touched and rolls once, with one Event; one
// that uses another is left alone; a second check of each, once the watcher has seen
// the admissions, touches nothing more.
func TestAChangeOfAUsedConfigMapTouchesEachUserOnce(t *testing.T) {
	volume := harnessPod()
	volume.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
	oneKey := harnessPod()
	oneKey.Containers[0].Env = []corev1.EnvVar{{Name: "VALUE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "value"}}}}
	for _, tt := range []struct {
		name    string
		pod     corev1.PodSpec
		touches int
	}{
		{"a Deployment that reads it whole through envFrom", harnessPod("cfg"), 1},
		{"a Deployment that mounts it", volume, 1},
		{"a Deployment that reads one of its keys", oneKey, 1},
		{"a Deployment that reads another ConfigMap", harnessPod("other"), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := harnessDeployment("web", nil)
			d.Spec.Template.Spec = tt.pod
			h := newHarness(t, Config{}, harnessConfigMap("cfg", nil), harnessConfigMap("other", nil), d)
			web := harnessKey(confighash.Deployment, "web")
			h.change(confighash.ConfigMap, "cfg")
			h.sync(web)
			h.caughtUp()
			h.sync(web)
			if got := h.touchesOf(web); got != tt.touches {
				t.Errorf("touched %d times, want %d", got, tt.touches)
			}
			if got := h.rolloutsOf(web); got != tt.touches {
				t.Errorf("rolled %d times, want %d", got, tt.touches)
			}
			if got := h.events.count(web, "ConfigChanged"); got != tt.touches {
				t.Errorf("%d ConfigChanged Events, want %d", got, tt.touches)
			}
		})
	}
}

// TestAChangeNobodyUsesTouchesNothing (rule 1): a change of a source no workload
// confighash acts on uses touches and rolls none.
func TestAChangeNobodyUsesTouchesNothing(t *testing.T) {
	optedOut := harnessDeployment("legacy", nil, "legacy")
	delete(optedOut.Annotations, confighash.AnnotationInject)
	for _, tt := range []struct {
		name   string
		kind   confighash.SourceKind
		source string
	}{
		{"a ConfigMap no workload uses", confighash.ConfigMap, "unused"},
		{"a Secret no workload uses", confighash.Secret, "unused"},
		{"a ConfigMap only a workload that does not opt in uses", confighash.ConfigMap, "legacy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, harnessConfigMap("cfg", nil), harnessConfigMap("unused", nil), harnessConfigMap("legacy", nil),
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unused"}}, harnessDeployment("web", nil, "cfg"), optedOut)
			h.change(tt.kind, tt.source)
			keys := []workloadKey{harnessKey(confighash.Deployment, "web"), harnessKey(confighash.Deployment, "legacy")}
			for _, key := range keys {
				h.sync(key)
			}
			for _, key := range keys {
				if n, r := h.touchesOf(key), h.rolloutsOf(key); n != 0 || r != 0 {
					t.Errorf("%s: touched %d times, rolled %d times; want neither", key, n, r)
				}
			}
		})
	}
}

// TestAWebhookThatNeverAnswersIsHealedAfterHealAfterTouches (rule 3): while the webhook
// fails open, the watcher touches the workload HealAfter times, then writes the hash
// itself, once, with a Healed Event and status; the hash it wrote is the webhook's, so
// the webhook's next admission rolls nothing more. A webhook that answers is not healed.
func TestAWebhookThatNeverAnswersIsHealedAfterHealAfterTouches(t *testing.T) {
	const healAfter = 2
	for _, tt := range []struct {
		name    string
		down    bool
		touches int
		healed  int
	}{
		{"a webhook that fails open", true, healAfter, 1},
		{"a webhook that answers", false, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{HealAfter: healAfter}, harnessConfigMap("cfg", nil), harnessDeployment("web", nil, "cfg"))
			web := harnessKey(confighash.Deployment, "web")
			h.admits.Store(!tt.down)
			h.change(confighash.ConfigMap, "cfg")
			// Through the queue: its retries, with backoff, count the touches that failed.
			for range tt.touches + tt.healed {
				h.next()
			}
			if got := h.touchesOf(web); got != tt.touches {
				t.Errorf("touched %d times, want %d", got, tt.touches)
			}
			if got := h.events.count(web, "Healed"); got != tt.healed {
				t.Errorf("%d Healed Events, want %d", got, tt.healed)
			}
			if got := h.rolloutsOf(web); got != 1 {
				t.Errorf("rolled %d times, want once", got)
			}
			if tt.healed > 0 {
				if s := h.status(web); s.Act != confighash.ActHealed {
					t.Errorf("status %q, want %s", s.Text(), confighash.ActHealed)
				}
			}
			h.admits.Store(true)
			h.write(web)
			if got := h.rolloutsOf(web); got != 1 {
				t.Errorf("the webhook's next admission rolled it again: %d rollouts", got)
			}
		})
	}
}

// TestAJobWhoseDataChangedIsRecreatedOnce: a running Job whose data changed is deleted
// and made again once, with the new hash; a finished one is left as it is and told.
func TestAJobWhoseDataChangedIsRecreatedOnce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		finished  bool
		recreated int
		told      int // NotRecreated
	}{
		{"a running Job", false, 1, 0},
		{"a finished Job", true, 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "migrate", Annotations: map[string]string{confighash.AnnotationInject: "true"}}}
			job.Spec.Template.Spec = harnessPod("cfg")
			job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
			if tt.finished {
				job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
			}
			h := newHarness(t, Config{}, harnessConfigMap("cfg", nil), job)
			key := harnessKey(confighash.Job, "migrate")
			uid, hash := h.workload(key).GetUID(), h.hash(key)
			h.change(confighash.ConfigMap, "cfg")
			h.sync(key)
			if got := h.events.count(key, "Recreated"); got != tt.recreated {
				t.Errorf("%d Recreated Events, want %d", got, tt.recreated)
			}
			if got := h.events.count(key, "NotRecreated"); got != tt.told {
				t.Errorf("%d NotRecreated Events, want %d", got, tt.told)
			}
			h.sync(key) // a second check, whatever the watcher has seen of the first
			if got := h.events.count(key, "NotRecreated"); got != tt.told {
				t.Errorf("after a second check, %d NotRecreated Events, want %d: told once per version", got, tt.told)
			}
			if got := h.createsOf(key); got != 1+tt.recreated {
				t.Errorf("made %d times, want %d", got, 1+tt.recreated)
			}
			if remade := h.workload(key).GetUID() != uid && h.hash(key) != hash; remade != (tt.recreated > 0) {
				t.Errorf("a Job of another UID and hash in its place: %v, want %v", remade, tt.recreated > 0)
			}
		})
	}
}
