package confighash

import (
	"cmp"
	"strings"
	"time"
)

// A wave rolls one change of a source through its users a few at a time: the watcher
// grants the next few leave to roll once those granted before have rolled out, and
// halts the wave when one of them failed. This file is where each user of a wave
// stands, from what the watcher read of it; the watcher keeps the grants and writes
// what a halt marks.

// RolloutStatus is where a workload's own controller stands with its latest pod
// template, as its status says: what a wave waits for.
type RolloutStatus int

const (
	// RolledOut: every pod runs the latest template and is available, or the kind has
	// nothing to wait for (a CronJob's next run, an OnDelete strategy).
	RolledOut RolloutStatus = iota
	RollingOut
	// RolloutFailed: the controller gave up (a Deployment past its progress deadline,
	// an Argo Rollout degraded).
	RolloutFailed
)

func (r RolloutStatus) String() string {
	return [...]string{"rolled out", "rolling out", "failed"}[r]
}

// WaveOrder is the order waves take the users of a source in: by kind, then by name.
func WaveOrder(kindA, nameA, kindB, nameB string) int {
	return cmp.Or(strings.Compare(kindA, kindB), strings.Compare(nameA, nameB))
}

// Grant is a wave's leave for a workload to roll to a hash, given at a time.
type Grant struct {
	Release string
	At      time.Time
}

// WaveUser is one user of a wave as the watcher reads it now.
type WaveUser struct {
	// Due is the hash its due change rolls it to, "" when none is due.
	Due string
	// HeldByHalt is set when a halt marked it held from Due.
	HeldByHalt bool
	// WindowOpen is set while its rollout window is open.
	WindowOpen bool
	// Grant is the wave's leave for it to roll, nil for none.
	Grant *Grant
	// Released is set when its pod template carries the hash a wave released it to.
	Released bool
	// FailureMarked is set when a halt marked it failed at its current hash.
	FailureMarked bool
	Status        RolloutStatus
	// Failing is set when pods of its current template are known not to start, or,
	// while it bakes, restarted or lost their readiness.
	Failing bool
	// Canary is its AnnotationBaking when it was in this change's first wave, nil when
	// it was not.
	Canary *Baking
}

// bakingAt reports whether the user bakes at now: it is in the first wave of a change
// that bakes, has rolled out, and its bake has not ended, or not started yet.
func (u WaveUser) bakingAt(now time.Time) bool {
	if u.Canary == nil || u.Canary.Bake == 0 {
		return false
	}
	if u.Canary.Since.IsZero() {
		return u.Status == RolledOut // the watcher marks when it starts
	}
	return now.Before(u.Canary.Until())
}

// Standing is where the users of a wave stand, by their index in the wave.
type Standing struct {
	// Pending are due to roll and not held by a halt: the next grants go to them.
	Pending []int
	// Failed were released and failed, and are not marked yet.
	Failed []int
	// Rolling counts those granted or released that have not rolled out yet, or bake;
	// Deadline is when the first granted of them fails for taking longer than the
	// wave timeout, or the first bake ends, zero for none.
	Rolling  int
	Deadline time.Time
	// Canaried is set when the change's first wave was released: the next waves are of
	// the wave size.
	Canaried bool
	// Ended are those whose grant ends: granted for an earlier change, not released by
	// a wave, their failure marked, or rolled out.
	Ended []int
}

// Stand classifies the users of a wave at now; a granted user that rolls for longer
// than timeout has failed.
func Stand(users []WaveUser, now time.Time, timeout time.Duration) Standing {
	var st Standing
	for i, u := range users {
		due := u.Due != ""
		granted := u.Grant != nil
		if granted && due && u.Grant.Release != u.Due {
			st.Ended = append(st.Ended, i) // granted for an earlier change
			granted = false
		}
		timedOut := granted && now.Sub(u.Grant.At) > timeout
		baking := u.bakingAt(now)
		st.Canaried = st.Canaried || u.Canary != nil
		switch {
		case due && u.HeldByHalt:
		case due && granted:
			st.Rolling++ // its release is under way
		case due && !u.WindowOpen:
			// outside its own window: it joins a wave when that opens, and until then
			// takes no one's place in one
		case due:
			st.Pending = append(st.Pending, i)
		case !u.Released || u.FailureMarked:
			if granted {
				st.Ended = append(st.Ended, i)
			}
		case u.Status == RolloutFailed || u.Status == RollingOut && (timedOut || u.Failing) || baking && u.Failing:
			st.Failed = append(st.Failed, i)
		case u.Status == RollingOut:
			st.Rolling++
			if granted {
				st.Deadline = earliest(st.Deadline, u.Grant.At.Add(timeout))
			}
		case baking:
			st.Rolling++
			if until := u.Canary.Until(); !until.IsZero() {
				st.Deadline = earliest(st.Deadline, until)
			}
		default:
			if granted {
				st.Ended = append(st.Ended, i) // rolled out
			}
		}
	}
	return st
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// Halts reports whether the wave halts: a user it released failed, and none still
// rolls, so that one halt names every failure of the wave.
func (st Standing) Halts() bool { return len(st.Failed) > 0 && st.Rolling == 0 }
