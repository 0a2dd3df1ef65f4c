package webhook

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/watches"
	"github.com/rs/zerolog"
)

// WatcherLease follows the watcher's leader Lease, which says what record forms the
// watcher that leads reads: the webhook writes no form it does not, so that a watcher
// of an earlier release never meets a record it cannot read and rolls its workload
// again (rule 12).
type WatcherLease struct {
	informer cache.SharedIndexInformer
	key      string
	started  time.Time
}

// leaseWait is how long the webhook waits for the Lease before it is ready without it,
// writing the form every release reads (a Role that does not let it read the Lease,
// from an install of an earlier release, must not keep it from serving).
const leaseWait = 10 * time.Second

// NewWatcherLease follows the Lease name in namespace, and only it. A Lease it may not
// read (the Role of an earlier release's install) is a warning: until it can, the
// webhook writes the record form every release reads, which newer watchers read more
// slowly, and says so once, and in confighash_webhook_watcher_lease_readable.
func NewWatcherLease(client kubernetes.Interface, namespace, name string, log zerolog.Logger) *WatcherLease {
	one := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	// Cannot fail: a registered kind no tenant writes, on an informer not started.
	inf, _ := watches.Informer(watches.WatcherLease, coordinationinformers.NewFilteredLeaseInformer(client, namespace, 0, cache.Indexers{}, one), nil)
	var told sync.Once
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			told.Do(func() {
				log.Warn().Err(err).Str("namespace", namespace).Str("name", name).
					Msg("cannot read the watcher's Lease: writing the record form every release reads until it can (grant the Role confighash-webhook-reads-watcher-lease)")
			})
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	return &WatcherLease{informer: inf, key: namespace + "/" + name}
}

// Readable reports whether the Lease could be read, or its absence known.
func (l *WatcherLease) Readable() bool { return l.informer.HasSynced() }

// Run follows the Lease until ctx is done.
func (l *WatcherLease) Run(ctx context.Context) {
	l.started = time.Now()
	go l.informer.Run(ctx.Done())
}

// Synced reports whether the Lease is known, or has been waited for long enough.
func (l *WatcherLease) Synced() bool {
	return l.informer.HasSynced() || !l.started.IsZero() && time.Since(l.started) > leaseWait
}

// Writes returns the newest form a record may be written in now: FormShared until the
// Lease is known, as one of an earlier release may hold it.
func (l *WatcherLease) Writes() confighash.Form {
	if !l.informer.HasSynced() {
		return confighash.FormShared
	}
	var lease *coordinationv1.Lease
	if obj, ok, _ := l.informer.GetStore().GetByKey(l.key); ok {
		lease, _ = obj.(*coordinationv1.Lease)
	}
	return confighash.LeaderWrites(lease, time.Now())
}
