package ledger

import (
	"bytes"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/confighash/confighash"
)

// The ledger decides what the scenarios report; its matching is checked here on
// made-up histories, without a cluster.
func TestLedgerMatchesRolloutsWithTheUpdatesTheyCarried(t *testing.T) {
	key, err := confighash.NewKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		// writes are the values of cfg, the first its creation; rollouts name the
		// index of the write each one's record carries.
		writes   []int
		rollouts map[int]int // time in ms -> index of the write carried
		want     Outcome
	}{
		{"each update rolled once", []int{0, 100, 200}, map[int]int{1100: 1, 2200: 2},
			Outcome{Updates: 2, Rollouts: 2, Latencies: []time.Duration{1000 * time.Millisecond, 2000 * time.Millisecond}}},
		{"two updates within the debounce roll once together", []int{0, 100, 300}, map[int]int{1300: 2},
			Outcome{Updates: 2, Rollouts: 1, Coalesced: 1, Latencies: []time.Duration{1200 * time.Millisecond, 1000 * time.Millisecond}}},
		{"the last update never rolled is lost", []int{0, 100, 200}, map[int]int{1100: 1},
			Outcome{Updates: 2, Rollouts: 1, Lost: 1, Latencies: []time.Duration{1000 * time.Millisecond}}},
		{"a rollout carrying nothing new is spurious", []int{0, 100}, map[int]int{1100: 1, 1500: 1},
			Outcome{Updates: 1, Rollouts: 2, Spurious: 1, Latencies: []time.Duration{1000 * time.Millisecond}}},
		{"a rollout back to the data the workload was born with is spurious", []int{0, 100}, map[int]int{1100: 1, 1500: 0},
			Outcome{Updates: 1, Rollouts: 2, Spurious: 1, Latencies: []time.Duration{1000 * time.Millisecond}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger(key)
			l.Use(confighash.Deployment, "ns", "web", ConfigMapIn("ns", "cfg"))
			var digests []confighash.Digest
			for i, ms := range tt.writes {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": string(rune('a' + i))}}
				l.RecordUpdate(cm, at(ms))
				digests = append(digests, l.updates[ConfigMapIn("ns", "cfg")][i].digest)
			}
			times := make([]int, 0, len(tt.rollouts))
			for ms := range tt.rollouts {
				times = append(times, ms)
			}
			slices.Sort(times)
			id := WorkloadID(confighash.Deployment, "ns", "web")
			for _, ms := range times {
				rec := confighash.Record{{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, Digest: digests[tt.rollouts[ms]], Seen: true}}
				l.rollouts[id] = append(l.rollouts[id], rollout{at: at(ms), record: rec})
			}
			got := l.Outcome(time.Time{})
			if got.Updates != tt.want.Updates || got.Rollouts != tt.want.Rollouts || got.Coalesced != tt.want.Coalesced ||
				got.Lost != tt.want.Lost || got.Spurious != tt.want.Spurious {
				t.Errorf("outcome = %+v, want %+v", got, tt.want)
			}
			if len(got.Latencies) != len(tt.want.Latencies) {
				t.Fatalf("latencies = %v, want %v", got.Latencies, tt.want.Latencies)
			}
			for i := range got.Latencies {
				if got.Latencies[i] != tt.want.Latencies[i] {
					t.Errorf("latencies = %v, want %v", got.Latencies, tt.want.Latencies)
				}
			}
		})
	}
}

// A template that comes back after another replaced it reuses its ReplicaSet: no
// count of ReplicaSets shows it, the followed templates do.
func TestLedgerCountsATemplateThatReturnsAsSpurious(t *testing.T) {
	key, err := confighash.NewKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger(key)
	l.Use(confighash.Deployment, "ns", "web", ConfigMapIn("ns", "cfg"))
	id := WorkloadID(confighash.Deployment, "ns", "web")
	l.templates[id] = []string{"a", "b", "c", "b"}
	if got := l.Outcome(time.Time{}); got.Spurious != 1 || len(got.SpuriousIn) != 1 {
		t.Errorf("templates a b c b: %d spurious (%v), want 1", got.Spurious, got.SpuriousIn)
	}
	l.templates[id] = []string{"a", "b", "c"}
	if got := l.Outcome(time.Time{}); got.Spurious != 0 {
		t.Errorf("templates a b c: %d spurious (%v), want 0", got.Spurious, got.SpuriousIn)
	}
}
