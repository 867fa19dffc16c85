package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/requests"
)

// An announcement hands each waiter the view of its own request, leaves
// other waiters waiting, and a line without a view wakes nobody.
func TestNotifierDeliversEachRequestItsView(t *testing.T) {
	n := NewNotifier(nil)
	now := time.Now().UTC().Truncate(time.Microsecond)
	reqs := make([]*requests.Request, 3)
	waits := make([]<-chan []byte, 3)
	for i := range reqs {
		reqs[i] = &requests.Request{ID: uuid.New(), Type: "t", AcceptedAt: now}
		var cancel func()
		waits[i], cancel = n.Wait(reqs[i].ID)
		defer cancel()
	}
	reqs[0].Status, reqs[0].Result, reqs[0].CompletedAt = domain.StatusSucceeded, json.RawMessage(`{"seatId":7}`), &now
	reqs[1].Status, reqs[1].Problem, reqs[1].CompletedAt = domain.StatusRejected, domain.NewProblem(domain.CodeSoldOut, "no seat is left"), &now

	msg, err := requests.DoneMessage(reqs[:2])
	require.NoError(t, err)
	n.deliver(msg)
	for i, r := range reqs[:2] {
		var got, want requests.View
		require.NoError(t, json.Unmarshal(<-waits[i], &got))
		want = r.View()
		require.Equal(t, want.RequestID, got.RequestID)
		require.Equal(t, want.Status, got.Status)
		require.JSONEq(t, string(want.Result), string(got.Result))
		require.Equal(t, want.Error, got.Error)
		require.True(t, want.CompletedAt.Equal(*got.CompletedAt))
	}
	select {
	case v := <-waits[2]:
		t.Fatalf("request 2 was not announced but its waiter got %q", v)
	default:
	}

	// A line without a view (an ids-only format holdfast never shipped)
	// wakes nobody.
	n.deliver(uuid.NewString() + "," + reqs[2].ID.String())
	select {
	case v := <-waits[2]:
		t.Fatalf("a line without a view woke request 2's waiter with %q", v)
	default:
	}
	msg, err = requests.DoneMessage(reqs[2:])
	require.NoError(t, err)
	n.deliver(msg)
	require.NotNil(t, <-waits[2])
	require.Empty(t, n.waiters, "woken waiters are forgotten")
}

// A Notifier remembers the requests accepted in its process with their
// owner, and whether they have been announced since: a poll that comes after
// the announcement must not wait for another.
func TestNotifierRemembersRequestsAcceptedHere(t *testing.T) {
	n := NewNotifier(nil)
	anyone := func(string) bool { return true }
	mine, other := &requests.Request{ID: uuid.New(), Type: "t", Status: domain.StatusSucceeded}, uuid.New()
	n.Track(mine.ID, "alice")

	got, ok := n.Local(mine.ID, anyone)
	require.True(t, ok)
	require.Equal(t, Tracked{Owner: "alice"}, got)
	_, ok = n.Local(other, anyone)
	require.False(t, ok, "accepted elsewhere")

	msg, err := requests.DoneMessage([]*requests.Request{mine})
	require.NoError(t, err)
	n.deliver(msg)
	got, ok = n.Local(mine.ID, func(owner string) bool { return owner == "mallory" })
	require.True(t, ok)
	require.Equal(t, Tracked{Owner: "alice", Announced: true}, got, "no view for a caller who may not read it")
	got, ok = n.Local(mine.ID, anyone)
	require.True(t, ok)
	require.True(t, got.Announced, "announced with no poll waiting")
	want, err := json.Marshal(mine.View())
	require.NoError(t, err)
	require.Equal(t, string(want), string(got.View), "the announced view is kept for a later poll")
	got, ok = n.Local(mine.ID, anyone)
	require.True(t, ok)
	require.Equal(t, Tracked{Owner: "alice", Announced: true}, got, "and handed out once")

	// A view delivered to a poll that was waiting is not kept as well.
	waited := &requests.Request{ID: uuid.New(), Type: "t", Status: domain.StatusRejected}
	n.Track(waited.ID, "carol")
	c, cancel := n.Wait(waited.ID)
	defer cancel()
	msg, err = requests.DoneMessage([]*requests.Request{waited})
	require.NoError(t, err)
	n.deliver(msg)
	require.NotNil(t, <-c)
	got, ok = n.Local(waited.ID, anyone)
	require.True(t, ok)
	require.Equal(t, Tracked{Owner: "carol", Announced: true}, got)

	// A line without a view announces nothing.
	bare := uuid.New()
	n.Track(bare, "bob")
	n.deliver(bare.String() + "\n" + bare.String() + " \n")
	got, ok = n.Local(bare, anyone)
	require.True(t, ok)
	require.Equal(t, Tracked{Owner: "bob"}, got)
}
