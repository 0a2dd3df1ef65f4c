package confighash

import (
	"slices"
	"testing"
	"time"
)

func TestStand(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	const timeout = time.Minute
	recent := &Grant{Release: "v1:new", At: now.Add(-10 * time.Second)}
	older := &Grant{Release: "v1:new", At: now.Add(-30 * time.Second)}
	expired := &Grant{Release: "v1:new", At: now.Add(-2 * timeout)}
	earlier := &Grant{Release: "v1:old", At: now.Add(-10 * time.Second)}
	released := WaveUser{Released: true}
	unstarted := &Baking{Bake: 5 * time.Minute}
	bakingSince := &Baking{Bake: 5 * time.Minute, Since: now.Add(-time.Minute)}
	baked := &Baking{Bake: 5 * time.Minute, Since: now.Add(-6 * time.Minute)}
	noBake := &Baking{}
	for _, tc := range []struct {
		name  string
		users []WaveUser
		want  Standing
	}{{
		name:  "a user due and in its window is pending",
		users: []WaveUser{{Due: "v1:new", WindowOpen: true}},
		want:  Standing{Pending: []int{0}},
	}, {
		name:  "a user due that a halt holds is neither pending nor rolling",
		users: []WaveUser{{Due: "v1:new", WindowOpen: true, HeldByHalt: true}},
	}, {
		name:  "a halt holds a user even if it was granted",
		users: []WaveUser{{Due: "v1:new", WindowOpen: true, HeldByHalt: true, Grant: recent}},
	}, {
		name:  "a user due outside its window takes no one's place",
		users: []WaveUser{{Due: "v1:new"}},
	}, {
		name:  "a user due and granted for that change rolls",
		users: []WaveUser{{Due: "v1:new", WindowOpen: true, Grant: recent}},
		want:  Standing{Rolling: 1},
	}, {
		name:  "a grant for an earlier change ends, and the user is pending again",
		users: []WaveUser{{Due: "v1:new", WindowOpen: true, Grant: earlier}},
		want:  Standing{Pending: []int{0}, Ended: []int{0}},
	}, {
		name: "a released user rolling out rolls, until the first grant's timeout",
		users: []WaveUser{
			{Released: true, Status: RollingOut, Grant: recent},
			{Released: true, Status: RollingOut, Grant: older},
		},
		want: Standing{Rolling: 2, Deadline: older.At.Add(timeout)},
	}, {
		name:  "a released user rolling out past its grant's timeout failed",
		users: []WaveUser{{Released: true, Status: RollingOut, Grant: expired}},
		want:  Standing{Failed: []int{0}},
	}, {
		name:  "a released user whose pods are known not to start failed",
		users: []WaveUser{{Released: true, Status: RollingOut, Grant: recent, Failing: true}},
		want:  Standing{Failed: []int{0}},
	}, {
		name:  "a released user whose controller gave up failed",
		users: []WaveUser{{Released: true, Status: RolloutFailed}},
		want:  Standing{Failed: []int{0}},
	}, {
		name:  "a failure already marked ends the grant, and is not failed again",
		users: []WaveUser{{Released: true, Status: RolloutFailed, FailureMarked: true, Grant: recent}},
		want:  Standing{Ended: []int{0}},
	}, {
		name:  "a user a wave did not release ends its grant",
		users: []WaveUser{{Status: RollingOut, Grant: recent}},
		want:  Standing{Ended: []int{0}},
	}, {
		name:  "a released user that rolled out ends its grant",
		users: []WaveUser{{Released: true, Grant: recent}},
		want:  Standing{Ended: []int{0}},
	}, {
		name:  "a user that rolled out with no grant ends nothing",
		users: []WaveUser{released},
	}, {
		name: "a wave of each kind, by index",
		users: []WaveUser{
			{Due: "v1:new", WindowOpen: true},
			{Released: true, Status: RolloutFailed},
			{Due: "v1:new", WindowOpen: true, Grant: recent},
			released,
			{Due: "v1:new", WindowOpen: true},
		},
		want: Standing{Pending: []int{0, 4}, Failed: []int{1}, Rolling: 1},
	}, {
		name:  "a canary rolled out, its bake not started yet, holds the wave with no deadline",
		users: []WaveUser{{Released: true, Canary: unstarted}, {Due: "v1:new", WindowOpen: true}},
		want:  Standing{Pending: []int{1}, Rolling: 1, Canaried: true},
	}, {
		name:  "a canary still rolling out has not started to bake: its grant's timeout holds",
		users: []WaveUser{{Released: true, Status: RollingOut, Grant: recent, Canary: unstarted}},
		want:  Standing{Rolling: 1, Deadline: recent.At.Add(timeout), Canaried: true},
	}, {
		name:  "a baking canary holds the wave until its bake ends",
		users: []WaveUser{{Released: true, Canary: bakingSince}, {Released: true, Canary: baked}},
		want:  Standing{Rolling: 1, Deadline: bakingSince.Until(), Canaried: true},
	}, {
		name:  "a baking canary whose pods restarted failed",
		users: []WaveUser{{Released: true, Canary: bakingSince, Failing: true}},
		want:  Standing{Failed: []int{0}, Canaried: true},
	}, {
		name:  "a baking canary scaled up rolls out: no failure",
		users: []WaveUser{{Released: true, Status: RollingOut, Canary: bakingSince}},
		want:  Standing{Rolling: 1, Canaried: true},
	}, {
		name:  "a canary that has baked, or had no bake, holds nothing",
		users: []WaveUser{{Released: true, Canary: baked, Failing: true}, {Released: true, Canary: noBake}},
		want:  Standing{Canaried: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Stand(tc.users, now, timeout)
			if !slices.Equal(got.Pending, tc.want.Pending) || !slices.Equal(got.Failed, tc.want.Failed) || !slices.Equal(got.Ended, tc.want.Ended) ||
				got.Rolling != tc.want.Rolling || !got.Deadline.Equal(tc.want.Deadline) || got.Canaried != tc.want.Canaried {
				t.Fatalf("Stand() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHalts(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Standing
		want bool
	}{
		{"a failure with nothing rolling halts", Standing{Failed: []int{0}, Pending: []int{1}}, true},
		{"a failure waits for the rest of the wave to roll out", Standing{Failed: []int{0}, Rolling: 1}, false},
		{"no failure, no halt", Standing{Pending: []int{0}}, false},
	} {
		if got := tc.st.Halts(); got != tc.want {
			t.Errorf("%s: Halts() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
