package e2e

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
		want     outcome
	}{
		{"each update rolled once", []int{0, 100, 200}, map[int]int{1100: 1, 2200: 2},
			outcome{updates: 2, rollouts: 2, latencies: []time.Duration{1000 * time.Millisecond, 2000 * time.Millisecond}}},
		{"two updates within the debounce roll once together", []int{0, 100, 300}, map[int]int{1300: 2},
			outcome{updates: 2, rollouts: 1, coalesced: 1, latencies: []time.Duration{1200 * time.Millisecond, 1000 * time.Millisecond}}},
		{"the last update never rolled is lost", []int{0, 100, 200}, map[int]int{1100: 1},
			outcome{updates: 2, rollouts: 1, lost: 1, latencies: []time.Duration{1000 * time.Millisecond}}},
		{"a rollout carrying nothing new is spurious", []int{0, 100}, map[int]int{1100: 1, 1500: 1},
			outcome{updates: 1, rollouts: 2, spurious: 1, latencies: []time.Duration{1000 * time.Millisecond}}},
		{"a rollout back to the data the workload was born with is spurious", []int{0, 100}, map[int]int{1100: 1, 1500: 0},
			outcome{updates: 1, rollouts: 2, spurious: 1, latencies: []time.Duration{1000 * time.Millisecond}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &ledger{key: key, updates: map[source][]ledgerUpdate{}, rollouts: map[string][]ledgerRollout{}, hashes: map[string]string{}, uses: map[string]source{}}
			l.use(confighash.Deployment, "ns", "web", configMapIn("ns", "cfg"))
			var digests []confighash.Digest
			for i, ms := range tt.writes {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": string(rune('a' + i))}}
				l.recordUpdate(cm, at(ms))
				digests = append(digests, l.updates[configMapIn("ns", "cfg")][i].digest)
			}
			times := make([]int, 0, len(tt.rollouts))
			for ms := range tt.rollouts {
				times = append(times, ms)
			}
			slices.Sort(times)
			id := workloadID(confighash.Deployment, "ns", "web")
			for _, ms := range times {
				rec := confighash.Record{{SourceRef: confighash.SourceRef{Kind: confighash.ConfigMap, Name: "cfg"}, Digest: digests[tt.rollouts[ms]], Seen: true}}
				l.rollouts[id] = append(l.rollouts[id], ledgerRollout{at: at(ms), record: rec})
			}
			got := l.outcome(time.Time{})
			if got.updates != tt.want.updates || got.rollouts != tt.want.rollouts || got.coalesced != tt.want.coalesced ||
				got.lost != tt.want.lost || got.spurious != tt.want.spurious {
				t.Errorf("outcome = %+v, want %+v", got, tt.want)
			}
			if len(got.latencies) != len(tt.want.latencies) {
				t.Fatalf("latencies = %v, want %v", got.latencies, tt.want.latencies)
			}
			for i := range got.latencies {
				if got.latencies[i] != tt.want.latencies[i] {
					t.Errorf("latencies = %v, want %v", got.latencies, tt.want.latencies)
				}
			}
		})
	}
}
