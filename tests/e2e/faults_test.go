package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/confighash/confighash/tests/cluster"
)

// TestAConcurrentWriterLosesNothingAndRollsNothingExtra: while ConfigMaps change
// every 200 ms, another controller scales and relabels the same Deployments every
// 50 ms (read, modify, update, as controllers do). The ledger, built from the API
// server's own state, finds every change rolled each workload once and no rollout
// without a change; the other writer's last writes all stand.
func TestAConcurrentWriterLosesNothingAndRollsNothingExtra(t *testing.T) {
	c := cluster.Require(t, testCluster)
	const n = 10
	ns, l, _ := oneToOne(t, c, n)

	type write struct {
		replicas int32
		label    string
	}
	last := map[string]write{}
	ctx, stop := context.WithCancel(t.Context())
	writer := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("web-%d", rng.IntN(n))
			want := write{replicas: int32(1 + i%2), label: fmt.Sprint(i)}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				d.Spec.Replicas = ptr.To(want.replicas)
				d.Labels = map[string]string{"writer": want.label}
				_, err = c.Client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
				return err
			})
			if ctx.Err() != nil {
				break
			}
			if err != nil {
				writer <- fmt.Errorf("the other writer's update of %s: %w", name, err)
				return
			}
			last[name] = want
			time.Sleep(50 * time.Millisecond)
		}
		writer <- nil
	}()
	rng := rand.New(rand.NewPCG(8, 8))
	mustDrive(t, c, l, 200*time.Millisecond, 20*time.Second, func() (string, string) { return ns, fmt.Sprintf("cm-%d", rng.IntN(n)) })
	stop()
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	l.settle(2 * time.Minute)
	o := l.outcome(time.Time{})
	t.Logf("updates %d, rollouts %d, coalesced %d, lost %d, spurious %d; the other writer wrote %d Deployments",
		o.updates, o.rollouts, o.coalesced, o.lost, o.spurious, len(last))
	if o.lost != 0 || o.spurious != 0 || o.rollouts == 0 {
		t.Fatalf("lost %d, spurious %d, rollouts %d: want every change rolled once and nothing else", o.lost, o.spurious, o.rollouts)
	}
	for name, want := range last {
		d, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas != want.replicas || d.Labels["writer"] != want.label {
			t.Errorf("%s: replicas %d, label %q; the other writer last wrote %d, %q", name, *d.Spec.Replicas, d.Labels["writer"], want.replicas, want.label)
		}
	}
}
