package watcher

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/confighash/confighash"
	"github.com/confighash/confighash/bounded"
)

// recreations are the Jobs whose recreation may be under way: written down and not
// yet finished, with the attempts refused; and those given up, by the UID of the Job
// and the hash of the data it was to be recreated for.
type recreations struct {
	mu       sync.Mutex
	pending  map[workloadKey]bool
	attempts map[workloadKey]int
	given    map[workloadKey]givenUp
	// reading is held while a record is read.
	reading chan struct{}
}

type givenUp struct {
	uid  types.UID
	hash string
}

func newRecreations() *recreations {
	return &recreations{pending: map[workloadKey]bool{}, attempts: map[workloadKey]int{}, given: map[workloadKey]givenUp{}, reading: make(chan struct{}, 1)}
}

// failed counts a refused attempt, and returns how many there were.
func (r *recreations) failed(key workloadKey) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[key]++
	return r.attempts[key]
}

func (r *recreations) giveUp(key workloadKey, uid types.UID, hash string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, key)
	delete(r.attempts, key)
	r.given[key] = givenUp{uid, hash}
}

// givenUp reports whether the recreation of the Job with this UID to the data of hash
// was given up.
func (r *recreations) givenUp(key workloadKey, uid types.UID, hash string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.given[key]
	if ok && (g.uid != uid || g.hash != hash) {
		delete(r.given, key) // another Job, or other data: tried again
		return false
	}
	return ok
}

func (r *recreations) add(key workloadKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[key] = true
}

func (r *recreations) done(key workloadKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, key)
}

// finished ends the recreation, and forgets its attempts.
func (r *recreations) finished(key workloadKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, key)
	delete(r.attempts, key)
}

func (r *recreations) has(key workloadKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending[key]
}

// recordsLimits bound the list of one namespace's records of recreations: their
// metadata alone, a record for each Job whose recreation is under way.
var recordsLimits = bounded.Limits{Page: 100, PageBytes: 2 << 20, Items: 1000, Bytes: 8 << 20}

// find queues the Jobs whose recreation a watcher wrote down and did not
// finish, so that the leader finishes them. It lists the records' metadata alone, in
// the namespaces confighash acts in, each namespace on its own: a namespace user may
// make Secrets of their type, as many and as large as their quota allows, and those of
// one namespace keep no other's from being found. Each record is read when its Job is
// worked on.
func (j *jobs) find(ctx context.Context) error {
	if !j.workloads.watches(confighash.Job.Kind) {
		return nil
	}
	namespaces, err := j.workloads.actingNamespaces(ctx, nil)
	if err != nil {
		return fmt.Errorf("list recreations under way: %w", err)
	}
	opts := metav1.ListOptions{LabelSelector: confighash.LabelRecreationOf, FieldSelector: fields.OneTermEqualSelector("type", confighash.RecreationType).String()}
	var errs []error
	for _, ns := range namespaces {
		err := bounded.Each(ctx, j.reads, secretsIn(ns), opts, recordsLimits, func(records []metav1.PartialObjectMetadata) error {
			for _, rec := range records {
				job := rec.Labels[confighash.LabelRecreationOf]
				if rec.Name != confighash.RecreationName(job) {
					continue // not the record of the Job it names
				}
				key := workloadKey{confighash.Job.Kind, rec.Namespace, job}
				j.recreations.add(key)
				j.queue.Add(key)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("list recreations under way in %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}
