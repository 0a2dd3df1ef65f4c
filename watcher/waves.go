package watcher

import (
	"sync"
	"time"

	"github.com/confighash/confighash"
)

// What the watcher keeps of the waves under way: the grants, who waits, why a due
// change is held, the markers just written. It only saves work: the markers on the
// workloads and their statuses, in the API server, say the rest after a restart.
// Where each user of a wave stands is confighash.Stand's to say.

// waves is what the watcher keeps of the waves under way, under one lock.
type waves struct {
	mu sync.Mutex
	// grants are the workloads a wave let roll, until they have rolled out.
	grants map[workloadKey]grant
	// waiting are the workloads of each namespace that wait for a wave; capped, one
	// of each namespace whose next wave waits for room under MaxRolling.
	waiting map[string]map[workloadKey]bool
	capped  map[string]workloadKey
	// held is why each held workload is held, and heldBy how many are held for each
	// reason; the hold an Event was sent for is the reporter's (said).
	held   map[workloadKey]confighash.HoldReason
	heldBy map[confighash.HoldReason]int
	// marked is the hash of the marker last written on a workload, until the cache
	// shows it.
	marked map[workloadKey]string
	// failing is why the pods of a template a wave let roll cannot start, by the
	// template's hash; halting, the waves whose halt a worker is writing.
	failing map[workloadKey]failing
	halting map[waveID]bool
	// generation moves whenever grants, failing or marked change; memo is valid while
	// no generation moved.
	generation uint64
	memo       waveMemo
}

// waveMemo saves what each check of a wave's waiting users would compute again on a
// wake of the wave: its users, sorted, and that users it granted still roll out.
// Without it, a wake of n waiting users costs n² decisions (5 s for 1,000 here).
type waveMemo struct {
	at    generations
	users map[waveID][]*view
	// busy holds, for a wave whose granted users still roll out, when the first of
	// them times out (zero: none can).
	busy map[waveID]time.Time
}

// generations count the changes of everything a wave's standing is computed from:
// the workloads, the sources, the waves, and the namespaces' modes and pacing.
type generations struct{ workloads, sources, waves, namespaces uint64 }

type waveID struct {
	namespace string
	source    confighash.SourceRef
}

// failing is why a template's pods failed; unsure when that is not known, as when a
// metric gate could not be read: it halts its wave and reverts nothing.
type failing struct {
	hash, why string
	unsure    bool
}

// grant is a wave's leave for a workload to roll.
type grant struct {
	confighash.Grant
	source confighash.SourceRef // whose change the wave rolls
	// canary is the baking marker its release writes, for the first wave of a change
	// that has a canary or a bake; nil for the others.
	canary *confighash.Baking
	// slotFreed is set once its pods stayed Pending too long: it no longer counts
	// against MaxRolling.
	slotFreed bool
}

func newWaves() *waves {
	return &waves{grants: map[workloadKey]grant{}, waiting: map[string]map[workloadKey]bool{}, capped: map[string]workloadKey{},
		held: map[workloadKey]confighash.HoldReason{}, heldBy: map[confighash.HoldReason]int{}, marked: map[workloadKey]string{}, failing: map[workloadKey]failing{},
		halting: map[waveID]bool{}}
}

// setHeld notes why the workload is held, none to forget it, and returns how many are
// held by reason when that changed; under the waves' lock.
func (ws *waves) setHeld(key workloadKey, reason confighash.HoldReason) map[string]int {
	was, ok := ws.held[key]
	if ok && was == reason || !ok && reason == "" {
		return nil
	}
	if ok {
		ws.heldBy[was]--
		delete(ws.held, key)
	}
	if reason != "" {
		ws.heldBy[reason]++
		ws.held[key] = reason
	}
	counts := make(map[string]int, len(ws.heldBy))
	for r, n := range ws.heldBy {
		counts[string(r)] = n
	}
	return counts
}

// hold notes why the workload is held and reports whether that is news for this
// release: an Event is due.
func (pc *pacer) hold(key workloadKey, reason confighash.HoldReason, release string) bool {
	ws := pc.waves
	ws.mu.Lock()
	counts := ws.setHeld(key, reason)
	ws.mu.Unlock()
	if counts != nil {
		pc.metrics.Held(counts)
	}
	pc.unreached(key) // held is not slow: no convergence latency
	return pc.report.news(key, "hold", string(reason)+release)
}

// unhold forgets the workload's hold, once released or no longer due.
func (pc *pacer) unhold(key workloadKey) {
	ws := pc.waves
	ws.mu.Lock()
	counts := ws.setHeld(key, "")
	delete(ws.waiting[key.Namespace], key)
	ws.stopWaiting(key)
	ws.mu.Unlock()
	pc.report.unsaid(key, "hold")
	if counts != nil {
		pc.metrics.Held(counts)
	}
}

// endGrant ends a wave's leave for the workload to roll, if it had one, and wakes the
// namespaces whose next wave waited for the room; under the waves' lock.
func (pc *pacer) endGrant(key workloadKey) bool {
	if _, ok := pc.waves.grants[key]; !ok {
		return false
	}
	delete(pc.waves.grants, key)
	delete(pc.waves.failing, key)
	pc.waves.generation++
	pc.wakeCapped()
	return true
}

// wakeWaiting queues the workloads of the namespace that wait for a wave: theirs may
// come. Under the waves' lock.
func (pc *pacer) wakeWaiting(namespace string) {
	for key := range pc.waves.waiting[namespace] {
		pc.queue.Add(key)
	}
}

// progressed checks again a workload a wave let roll, whose rollout moved on, and the
// workloads of its namespace that wait for a wave: theirs may come.
func (pc *pacer) progressed(v *view) {
	pc.waves.mu.Lock()
	defer pc.waves.mu.Unlock()
	if _, ok := pc.waves.grants[keyOf(v)]; ok {
		pc.queue.Add(keyOf(v))
	}
	pc.wakeWaiting(v.Namespace)
}

// memo returns the memo of the current generations, emptied if any moved since it was
// filled; under the waves' lock. What is computed from the cache after it was taken
// goes in only if no generation moved meanwhile.
func (pc *pacer) memo() *waveMemo {
	workloads, namespaces := pc.workloads.generations()
	now := generations{workloads, pc.sources.Generation(), pc.waves.generation, namespaces}
	if pc.waves.memo.at != now || pc.waves.memo.users == nil {
		pc.waves.memo = waveMemo{at: now, users: map[waveID][]*view{}, busy: map[waveID]time.Time{}}
	}
	return &pc.waves.memo
}
