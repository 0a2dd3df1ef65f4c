package confighash

import (
	"errors"
)

// MaxAnnotationBytes is the API server's bound on an object's annotations, keys and
// values together (apimachinery's TotalAnnotationSizeLimitB). A write over it is
// refused as invalid, which the webhook's failurePolicy does not cover: the patch
// must never take a workload over it. The pod template's annotations are bounded
// apart.
const MaxAnnotationBytes = 256 << 10

// touchReserve is what the metadata keeps free of confighash's record for the
// watcher's touch, which adds its trigger and release markers.
const touchReserve = 1 << 10

// ErrAnnotationsTooLarge is returned by Decide for a workload that the record or the
// hash would take over MaxAnnotationBytes.
var ErrAnnotationsTooLarge = errors.New("annotations too large")

// AnnotationBytes are the bytes of a workload's annotations apart from those
// confighash writes at admission, on its metadata and on its pod template.
type AnnotationBytes struct{ Metadata, Template int }

// writtenAt are the annotations the webhook writes, by where.
var (
	writtenOnMetadata = []string{AnnotationSources, AnnotationAdopted, AnnotationRemakeSnapshots}
	writtenOnTemplate = []string{AnnotationHash, AnnotationPinned}
)

// annotationBytesOf returns the bytes of the workload's other annotations when they
// take more than a quarter of the bound, zero otherwise: the largest record then still
// fits (MaxSources entries of at most 512 bytes), and the watcher, which compares
// states, is not woken by each annotation written beside small ones.
func annotationBytesOf(w *Workload) AnnotationBytes {
	b := AnnotationBytes{Metadata: bytesApart(w.Annotations, writtenOnMetadata), Template: bytesApart(w.Template.Annotations, writtenOnTemplate)}
	if b.Metadata <= MaxAnnotationBytes/4 && b.Template <= MaxAnnotationBytes/4 {
		return AnnotationBytes{}
	}
	return b
}

// bytesApart counts the annotations as the API server does, those named aside.
func bytesApart(annotations map[string]string, aside []string) int {
	n := 0
	for k, v := range annotations {
		n += len(k) + len(v)
	}
	for _, k := range aside {
		if v, ok := annotations[k]; ok {
			n -= len(k) + len(v)
		}
	}
	return n
}

func entryBytes(key, value string) int {
	if value == "" {
		return 0
	}
	return len(key) + len(value)
}

// recordBytesAtMost bounds the rendered record and the annotations beside it: an
// entry's kind, two digests and its tokens take less than 256 bytes besides its name.
func recordBytesAtMost(r Record) int {
	n := 1024
	for _, e := range r {
		n += 256 + len(e.Name)
	}
	return n
}
