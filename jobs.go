package confighash

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"strings"
	"time"
)

// RunName is the name of the Job a CronJob starts for the data of its hash: a
// CronJob's name is at most 52 characters, so this one is at most 63.
func RunName(cronJob, hash string) string {
	_, digits, _ := strings.Cut(hash, ":")
	return cronJob + "-" + digits[:min(10, len(digits))]
}

// RecreationName is the name of the record of the recreation of the named Job. A
// Job's name is at most 63 characters, so this one always fits.
func RecreationName(job string) string { return "confighash-recreation-" + job }

// RecreationSeal is the seal of the record that replaces the Job of this namespace,
// name and UID by the given one. Only a holder of the hash key can write it: a
// tenant who can write Secrets but not Jobs cannot have the watcher make a Job.
func RecreationSeal(key Key, namespace, name, replaces string, job []byte) string {
	return seal(key, recreationSealPrefix, namespace, name, replaces, string(job))
}

// RecreationSealed reports whether the annotations hold the seal of that record.
func RecreationSealed(key Key, namespace, name, replaces string, job []byte, annotations map[string]string) bool {
	return sealedWith(annotations, RecreationSeal(key, namespace, name, replaces, job))
}

// A record of a recreation is acted on only while it is fresh: a namespace user can
// read the records of their namespace, and a copy of one, made again long after its
// recreation was done, would have the watcher make that Job again. The watcher writes
// when it sealed the record in AnnotationSealedAt, and in AnnotationSealedAtSeal a seal
// over that time and the record's own seal, so that the time cannot be changed nor put
// on another record. A record without them was written by an earlier release, which
// wrote none: it is read as before (rule 12).
const (
	// RecreationFresh is how long a record is acted on after it was sealed: a
	// failover or a restart finishes a recreation within minutes.
	RecreationFresh = time.Hour
)

// ErrRecordStale is a record sealed longer ago than RecreationFresh.
var ErrRecordStale = errors.New("sealed longer ago than a recreation takes")

// SealedAt returns the annotations that say the record with the seal recordSeal was
// sealed at.
func SealedAt(key Key, recordSeal string, at time.Time) map[string]string {
	text := at.UTC().Format(time.RFC3339)
	return map[string]string{AnnotationSealedAt: text, AnnotationSealedAtSeal: seal(key, sealedAtPrefix, recordSeal, text)}
}

// RecordFresh checks when the record whose annotations these are was sealed: nil
// while it is fresh, or for a record of an earlier release, which says nothing of it;
// ErrRecordStale past RecreationFresh; another error when the time is not sealed
// with the key, or not a time.
func RecordFresh(key Key, annotations map[string]string, now time.Time) error {
	text, ok := annotations[AnnotationSealedAt]
	if !ok {
		return nil
	}
	want := seal(key, sealedAtPrefix, annotations[AnnotationSeal], text)
	if !hmac.Equal([]byte(annotations[AnnotationSealedAtSeal]), []byte(want)) {
		return errors.New("its time is not sealed with the hash key")
	}
	at, err := time.Parse(time.RFC3339, text)
	switch {
	case err != nil:
		return fmt.Errorf("its time %q: %w", text, err)
	case now.Sub(at) > RecreationFresh:
		return fmt.Errorf("%w: at %s", ErrRecordStale, text)
	}
	return nil
}
