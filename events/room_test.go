package events

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/events/draw"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
)

// testRoom is a waiting room on a private Redis database for event 1 with
// settings e; the users enter it in order (places 1, 2, …), unfenced.
func testRoom(t *testing.T, e Event, users ...string) (*Room, Event) {
	t.Helper()
	_, rdb := testenv.Redis(t)
	seed, err := draw.NewSeed()
	require.NoError(t, err)
	e.EventID, e.seed, e.version = 1, seed, 1
	if e.TokenTTLSeconds == 0 {
		e.TokenTTLSeconds = 60
	}
	r := NewRoom(rdb, "a-secret-long-enough-for-hs256-0123456789")
	require.NoError(t, r.Configure(context.Background(), e))
	for i, u := range users {
		_, err := enterHeld(r, e, u, int64(i+1))
		require.NoError(t, err)
	}
	return r, e
}

// enterHeld enters user as the holder of e's queue key would: with its
// lease set to a token and that token passed.
func enterHeld(r *Room, e Event, user string, place int64) (Status, error) {
	ctx := context.Background()
	if err := r.rdb.Set(ctx, leaseKey(e.EventID), 1, 0).Err(); err != nil {
		return Status{}, err
	}
	return r.enter(ctx, e, 1, user, place)
}

// leaseKey is the queue's lease, enterScript's last key.
func leaseKey(ev int64) string {
	keys := enterKeys(ev)
	return keys[len(keys)-1]
}

func users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("u%02d", i)
	}
	return out
}

func settings(max, presence, claim int) Event {
	e := newEventSettings()
	e.MaxConcurrent, e.PresenceTimeoutSeconds, e.ClaimWindowSeconds = max, presence, claim
	return e
}

// Many users ask for a token at the same instant: the script admits exactly
// as many as the cap allows, and with admitPerMinute as many as the rate
// allows, whichever is less.
func TestTokenScriptHoldsTheCapAndTheRate(t *testing.T) {
	for _, c := range []struct {
		name      string
		max, rate int
		want      int
	}{
		{"cap binds", 5, 0, 5},
		{"rate binds", 100, 7, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := settings(c.max, 3600, 3600)
			if c.rate > 0 {
				e.AdmitPerMinute = &c.rate
			}
			us := users(50)
			r, e := testRoom(t, e, us...)
			var admitted sync.Map
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, u := range us {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 20 { // ask again while others are admitted ahead
						a, err := r.Issue(context.Background(), e, u)
						require.NoError(t, err)
						if a.Token != "" {
							admitted.Store(u, true)
							return
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			n := 0
			admitted.Range(func(any, any) bool { n++; return true })
			require.Equal(t, c.want, n)
			census, err := r.Census(context.Background(), e)
			require.NoError(t, err)
			require.Equal(t, int64(c.want), census.AdmittedLastMinute)
			require.LessOrEqual(t, census.ActiveTokens, int64(c.max))
		})
	}
}

// The control: the same admission done as a check and then an act, two
// round trips instead of one script. With every caller's check done before
// any act (a barrier forces it), all fifty see free slots and all fifty
// take a token: ten times the cap.
func TestTokenCheckThenActControlExceedsTheCap(t *testing.T) {
	us := users(50)
	r, e := testRoom(t, settings(5, 3600, 3600), us...)
	ctx := context.Background()
	tokens, queue := roomKey(e.EventID, "tokens"), roomKey(e.EventID, "queue")
	var checked, wg sync.WaitGroup
	checked.Add(len(us))
	for _, u := range us {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := e.member(u)
			active := r.rdb.ZCard(ctx, tokens).Val() // check
			checked.Done()
			checked.Wait() // every check before any act
			if active < int64(e.MaxConcurrent) {
				r.rdb.ZAdd(ctx, tokens, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: m}) // act
				r.rdb.ZRem(ctx, queue, m)
			}
		}()
	}
	wg.Wait()
	require.Greater(t, r.rdb.ZCard(ctx, tokens).Val(), int64(e.MaxConcurrent), "check-then-act oversteps the cap")
}

// A user silent for longer than the presence timeout loses its place at
// the next script, with no sweeper: the next user moves up and is ready.
// Its own status then says expired, and it may enter again, at the back.
func TestSilentUserLosesItsPlace(t *testing.T) {
	us := users(3)
	r, e := testRoom(t, settings(1, 1, 3600), us...)
	ctx := context.Background()
	// u01 and u02 keep polling; u00 (rank 0, ready) says nothing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := r.Status(ctx, e, "u01")
		require.NoError(t, err)
		if st.Status == "ready" {
			require.Equal(t, int64(0), *st.Rank)
			break
		}
		require.Equal(t, "waiting", st.Status)
		_, err = r.Status(ctx, e, "u02")
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "u00 never lost its place")
		// The pace of u01's and u02's polls: they must keep showing presence
		// while u00's one-second timeout runs on Redis's clock.
		time.Sleep(100 * time.Millisecond)
	}
	st, err := r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "expired", st.Status)
	_, err = r.Issue(ctx, e, "u00")
	require.Equal(t, ErrNotQueued{Status: "expired"}, err)

	st, err = enterHeld(r, e, "u00", 100)
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Status)
	require.Equal(t, int64(2), *st.Rank, "back of the line")
	c, err := r.Census(ctx, e)
	require.NoError(t, err)
	require.Equal(t, Census{InLine: 3, Ready: 1, Waiting: 2}, c)
}

// A ready user has claimWindow to take its token, from the moment it is
// first told: past claimBy it loses its place and the next user is ready.
// A user who is no longer ready (paused) when its window ends keeps its
// place and gets a new window when its turn comes back.
func TestClaimWindow(t *testing.T) {
	us := users(2)
	r, e := testRoom(t, settings(1, 3600, 1), us...)
	ctx := context.Background()
	st, err := r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)
	require.NotNil(t, st.ClaimBy)
	first := *st.ClaimBy
	require.WithinDuration(t, time.Now().Add(time.Second), first, 500*time.Millisecond)
	st, err = r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, first, *st.ClaimBy, "the window starts once")

	require.Eventually(t, func() bool {
		st, err := r.Status(ctx, e, "u01")
		require.NoError(t, err)
		return st.Status == "ready"
	}, 10*time.Second, 50*time.Millisecond)
	st, err = r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "expired", st.Status)

	// Paused while ready: the window lapses, the place stays.
	e.AdmissionPaused, e.version = true, 2
	require.NoError(t, r.Configure(ctx, e))
	// Past u01's claimBy, while paused: the window runs on Redis's clock
	// (one second, the setting's unit), so only real time ends it.
	time.Sleep(1200 * time.Millisecond)
	st, err = r.Status(ctx, e, "u01")
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Status)
	require.True(t, st.AdmissionPaused)
	require.Nil(t, st.EtaSeconds, "no ETA while paused")
	a, err := r.Issue(ctx, e, "u01")
	require.NoError(t, err)
	require.Empty(t, a.Token)
	require.Equal(t, "paused", a.Status.reason)
	e.AdmissionPaused, e.version = false, 3
	require.NoError(t, r.Configure(ctx, e))
	st, err = r.Status(ctx, e, "u01")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)
	require.True(t, st.ClaimBy.After(time.Now()), "a new window")
	a, err = r.Issue(ctx, e, "u01")
	require.NoError(t, err)
	require.NotEmpty(t, a.Token)
}

// Settings in Redis move only forward: an older version never overwrites a
// newer one, and a room whose settings Redis lost has them put back by the
// first script that misses them.
func TestRoomSettingsOnlyMoveForward(t *testing.T) {
	r, e := testRoom(t, settings(1, 3600, 3600), "u00", "u01")
	ctx := context.Background()
	newer := e
	newer.MaxConcurrent, newer.version = 2, 5
	require.NoError(t, r.Configure(ctx, newer))
	require.NoError(t, r.Configure(ctx, e)) // a stale copy
	st, err := r.Status(ctx, e, "u01")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status, "two slots: the newer setting holds")

	require.NoError(t, r.rdb.Del(ctx, roomKey(e.EventID, "cfg")).Err())
	st, err = r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)
	require.Equal(t, "1", r.rdb.HGet(ctx, roomKey(e.EventID, "cfg"), "max").Val(), "put back from the caller's copy")
}

// The ETA counts the users between the free slots and the caller, at the
// rate that binds: the admission inlet when it is what holds them, else the
// last minute's admissions; unknown when neither is known, or while paused
// or in the pre-queue.
func TestETA(t *testing.T) {
	for _, c := range []struct {
		name           string
		rank, free     int64
		reason         string
		admitted       int64
		admitPerMinute int64
		want           *int64
	}{
		{"measured", 4, 0, "full", 30, 0, ptr(int64(10))},
		{"rate binds", 4, 0, "rate", 30, 10, ptr(int64(30))},
		{"nothing measured, rate known", 0, 0, "full", 0, 10, ptr(int64(6))},
		{"nothing measured", 4, 0, "full", 0, 0, nil},
		{"paused", 4, 0, "paused", 30, 0, nil},
		{"pre-queue", 4, 0, "prequeue", 30, 0, nil},
		{"free slots ahead", 4, 2, "full", 60, 0, ptr(int64(3))},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, eta(c.rank, c.free, c.reason, c.admitted, c.admitPerMinute))
		})
	}
}

func ptr[T any](v T) *T { return &v }

// An entry applied by a holder whose lease has moved on changes nothing.
func TestEnterIsFenced(t *testing.T) {
	r, e := testRoom(t, settings(1, 3600, 3600))
	ctx := context.Background()
	lease := leaseKey(e.EventID)
	require.NoError(t, r.rdb.Set(ctx, lease, 5, 0).Err())
	_, err := r.enter(ctx, e, 4, "late", 1)
	require.ErrorIs(t, err, keyed.ErrLeaseLost)
	st, err := r.Status(ctx, e, "late")
	require.NoError(t, err)
	require.Equal(t, "not_queued", st.Status)
	st, err = r.enter(ctx, e, 5, "late", 1)
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)
}

// A pause that ends before a ready user's claimBy gives it a full window
// again when its turn comes back, as does any change of the settings.
func TestClaimWindowRestartsAfterAShortPause(t *testing.T) {
	r, e := testRoom(t, settings(1, 3600, 2), "u00")
	ctx := context.Background()
	st, err := r.Status(ctx, e, "u00")
	require.NoError(t, err)
	first := *st.ClaimBy

	e.AdmissionPaused, e.version = true, 2
	require.NoError(t, r.Configure(ctx, e))
	st, err = r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Status)
	// Real time must pass for a new claimBy to differ from the first: the
	// room reads Redis's clock.
	time.Sleep(500 * time.Millisecond)
	e.AdmissionPaused, e.version = false, 3
	require.NoError(t, r.Configure(ctx, e))
	st, err = r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)
	require.True(t, st.ClaimBy.After(first.Add(400*time.Millisecond)), "a new window, not the one told before the pause: %v then %v", first, *st.ClaimBy)

	require.NoError(t, r.Configure(ctx, e)) // the same version again, as the periodic task does
	again, err := r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, *st.ClaimBy, *again.ClaimBy, "rewriting the same settings restarts nothing")
}

// The admission settings come from Redis, not from the caller's copy of
// the event: an API whose cached event predates a PATCH that set a rate
// still answers with the rate that binds and its ETA.
func TestStatusUsesTheRoomsSettingsNotTheCallersCopy(t *testing.T) {
	r, e := testRoom(t, settings(100, 3600, 3600), "u00", "u01", "u02")
	ctx := context.Background()
	stale := e
	one := 1
	e.AdmitPerMinute, e.version = &one, 2
	require.NoError(t, r.Configure(ctx, e))
	a, err := r.Issue(ctx, stale, "u00")
	require.NoError(t, err)
	require.NotEmpty(t, a.Token)
	sts, err := r.Statuses(ctx, stale, []string{stale.member("u02")})
	require.NoError(t, err)
	require.Equal(t, "waiting", sts[0].Status)
	require.Equal(t, "rate", sts[0].reason)
	require.Equal(t, int64(120), *sts[0].EtaSeconds, "two ahead of it at one a minute")
}

// Entry tokens are signed with a key of their own, derived from the users'
// secret: the room's own tokens verify; one signed with the users' secret
// itself, with every claim right, is refused (before the derived key the
// room took it: the control is this same token under the old key), and the
// room's tokens do not verify under the users' secret.
func TestEntryTokensHaveAKeyOfTheirOwn(t *testing.T) {
	const secret = "a-secret-long-enough-for-hs256-0123456789"
	r := &Room{secret: entryKey(secret)}
	exp := time.Now().Add(time.Minute)
	own, err := r.sign(7, "ann", exp)
	require.NoError(t, err)
	require.True(t, r.VerifyToken(own, 7, "ann"))
	require.False(t, r.VerifyToken(own, 8, "ann"), "another event")

	withUsersKey, err := (&Room{secret: []byte(secret)}).sign(7, "ann", exp)
	require.NoError(t, err)
	require.False(t, r.VerifyToken(withUsersKey, 7, "ann"), "a token signed with JWT_SECRET itself")
	require.True(t, (&Room{secret: []byte(secret)}).VerifyToken(withUsersKey, 7, "ann"), "the control: the users' key alone takes it")
	require.NotEqual(t, []byte(secret), entryKey(secret))
	require.Len(t, entryKey(secret), 32)
}

// silence makes user silent for d, as if its last sign of life had come d
// ago at Redis's clock (the room's clock): its seen score is moved back.
// What a phone that switched apps does, without the test waiting for it.
func silence(t *testing.T, r *Room, e Event, user string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := r.rdb.Time(ctx).Result()
	require.NoError(t, err)
	seen := roomKey(e.EventID, "seen")
	require.NoError(t, r.rdb.ZAddXX(ctx, seen, redis.Z{Score: float64(now.Add(-d).UnixMilli()), Member: e.member(user)}).Err())
	require.NoError(t, r.rdb.ZScore(ctx, seen, e.member(user)).Err(), "%s is in line and was not silent already", user)
}

// Issue 49: a fan far from the front keeps its place while silent (a phone
// that switched apps sends nothing) and finds it again when it comes back.
func TestSilentUserFarBackKeepsItsPlace(t *testing.T) {
	us := users(52)
	r, e := testRoom(t, settings(1, 60, 60), us...)
	ctx := context.Background()
	silence(t, r, e, "u50", 2*time.Minute)
	st, err := r.Status(ctx, e, "u00") // a script runs while u50 is silent
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)
	c, err := r.Census(ctx, e)
	require.NoError(t, err)
	require.Equal(t, int64(52), c.InLine, "nobody left the line")

	st, err = r.Status(ctx, e, "u50")
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Status)
	require.Equal(t, int64(50), *st.Rank, "its place, back")
}

// Presence is checked at the turn and for the next presenceLookahead in
// line: a user there silent for longer than the presence timeout is passed
// over (expired) by the next script, whoever runs it; one further back
// keeps its place. With maxConcurrent 1 and no token out, one slot is free,
// so ranks 0 to 10 are checked.
func TestPresenceIsCheckedNearTheFront(t *testing.T) {
	for _, c := range []struct {
		name string
		rank int
		kept bool
	}{
		{"its turn", 0, false},
		{"last of the look-ahead", 1 + presenceLookahead - 1, false},
		{"first past the look-ahead", 1 + presenceLookahead, true},
		{"further back", 1 + presenceLookahead + 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			us := users(20)
			r, e := testRoom(t, settings(1, 60, 60), us...)
			ctx := context.Background()
			silent := us[c.rank]
			silence(t, r, e, silent, 61*time.Second)
			_, err := r.Status(ctx, e, us[19]) // any script applies the rule
			require.NoError(t, err)
			st, err := r.Status(ctx, e, silent)
			require.NoError(t, err)
			if !c.kept {
				require.Equal(t, "expired", st.Status)
				return
			}
			require.Equal(t, "waiting", st.Status)
			require.Equal(t, int64(c.rank), *st.Rank)
		})
	}
}

// The liveness guard with users who keep their place while silent: when
// the line reaches them, the ones still silent are passed over in that same
// script, all at once, so the present user behind them is next at once; one
// that came back in time is in its place. The control has the same silences
// within a presence timeout of an hour: nobody is passed over, and the line
// waits for the fifteen silent users ahead.
func TestAwayUsersArePassedOverWhenTheLineReachesThem(t *testing.T) {
	for _, c := range []struct {
		name     string
		presence int
		rank     int64 // of u30, after u00–u14 leave
		inLine   int64
		u15, u20 string // their statuses then
	}{
		{"silent past the presence timeout", 60, 1, 11, "expired", "ready"},
		{"control: within the presence timeout", 3600, 15, 25, "ready", "waiting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			us := users(40)
			r, e := testRoom(t, settings(1, c.presence, 60), us...)
			ctx := context.Background()
			for _, u := range us[15:30] { // far back, beyond the look-ahead
				silence(t, r, e, u, 2*time.Minute)
			}
			st, err := r.Status(ctx, e, "u20") // one comes back
			require.NoError(t, err)
			require.Equal(t, int64(20), *st.Rank)
			census, err := r.Census(ctx, e)
			require.NoError(t, err)
			require.Equal(t, int64(40), census.InLine, "silent far back, nobody left the line")

			for _, u := range us[:15] {
				require.NoError(t, r.Leave(ctx, e, u))
			}
			st, err = r.Status(ctx, e, "u30")
			require.NoError(t, err)
			require.Equal(t, c.rank, *st.Rank)
			census, err = r.Census(ctx, e)
			require.NoError(t, err)
			require.Equal(t, c.inLine, census.InLine)
			st, err = r.Status(ctx, e, "u20")
			require.NoError(t, err)
			require.Equal(t, c.u20, st.Status, "back in time, it kept its place")
			st, err = r.Status(ctx, e, "u15")
			require.NoError(t, err)
			require.Equal(t, c.u15, st.Status)
		})
	}
}

// While admissions are paused nobody's turn can come, so nobody is passed
// over for silence: the line keeps its order. The first script after they
// resume checks the front again.
func TestNobodyIsPassedOverWhilePaused(t *testing.T) {
	r, e := testRoom(t, settings(1, 60, 60), "u00", "u01")
	ctx := context.Background()
	e.AdmissionPaused, e.version = true, 2
	require.NoError(t, r.Configure(ctx, e))
	silence(t, r, e, "u00", 2*time.Minute)
	st, err := r.Status(ctx, e, "u01")
	require.NoError(t, err)
	require.Equal(t, int64(1), *st.Rank, "u00 is still ahead")

	e.AdmissionPaused, e.version = false, 3
	require.NoError(t, r.Configure(ctx, e))
	st, err = r.Status(ctx, e, "u01")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status, "u00, silent at its turn, is passed over")
	st, err = r.Status(ctx, e, "u00")
	require.NoError(t, err)
	require.Equal(t, "expired", st.Status)
}
