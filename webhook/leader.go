package webhook

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/confighash/confighash"
)

// WatcherLease follows the watcher's leader Lease, which says what record forms the
// watcher that leads reads: the webhook writes no form it does not, so that a watcher
// of an earlier release never meets a record it cannot read and rolls its workload
// again (DESIGN rule 12).
type WatcherLease struct {
	informer cache.SharedIndexInformer
	key      string
	now      func() time.Time
}

// NewWatcherLease follows the Lease name in namespace, and only it.
func NewWatcherLease(client kubernetes.Interface, namespace, name string) *WatcherLease {
	one := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	return &WatcherLease{
		informer: coordinationinformers.NewFilteredLeaseInformer(client, namespace, 0, cache.Indexers{}, one),
		key:      namespace + "/" + name,
		now:      time.Now,
	}
}

// Run follows the Lease until ctx is done.
func (l *WatcherLease) Run(ctx context.Context) { go l.informer.Run(ctx.Done()) }

// Writes returns the newest form a record may be written in now: FormShared until the
// Lease is known.
func (l *WatcherLease) Writes() confighash.Form {
	if !l.informer.HasSynced() {
		return confighash.FormShared
	}
	var lease *coordinationv1.Lease
	if obj, ok, _ := l.informer.GetStore().GetByKey(l.key); ok {
		lease, _ = obj.(*coordinationv1.Lease)
	}
	return confighash.LeaderWrites(lease, l.now())
}
