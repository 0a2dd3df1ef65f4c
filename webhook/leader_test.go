package webhook

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/confighash/confighash"
)

// syncBuffer is a log a test reads while the informer's goroutine writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestALeaseTheWebhookMayNotReadIsAWarning (issue 52): a webhook whose Role does not
// let it read the watcher's Lease writes the record form every release reads, as it
// must, but no longer silently: it says so once, and Readable (the metric
// confighash_webhook_watcher_lease_readable) stays false.
func TestALeaseTheWebhookMayNotReadIsAWarning(t *testing.T) {
	for _, forbidden := range []bool{false, true} {
		client := fake.NewClientset()
		if forbidden {
			client.PrependReactor("list", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("no Role"))
			})
		}
		var log syncBuffer
		lease := NewWatcherLease(client, "confighash", "confighash-watcher", zerolog.New(&log))
		lease.Run(t.Context())
		if forbidden {
			waitFor(t, "the warning", func() bool { return strings.Contains(log.String(), "cannot read the watcher's Lease") })
			time.Sleep(200 * time.Millisecond)
			if lease.Readable() || lease.Writes() != confighash.FormShared || strings.Count(log.String(), "cannot read") != 1 {
				t.Errorf("forbidden: readable %v, writes %v, log %q; want unreadable, the shared form, one warning", lease.Readable(), lease.Writes(), log.String())
			}
			continue
		}
		waitFor(t, "the Lease to be read", lease.Readable)
		if log.String() != "" {
			t.Errorf("allowed: logged %q", log.String())
		}
	}
}
