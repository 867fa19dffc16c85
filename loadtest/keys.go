package loadtest

import (
	"context"
	"fmt"
)

// What isolation (K4) and recovery (K5) share: first-come-first-served
// grabs on events of their own, submitted while holdfast's workers are
// held back, so that the whole backlog is in its mailboxes before any of it
// is applied; every grab has a seat waiting, so every write must end
// seated, exactly once.

// holdWorkers pauses holdfast's queues on the run's Redis until the
// returned watch's close (or resume).
func holdWorkers(e *Env, scenario string) (*queueWatch, error) {
	if e.Opt.RedisURL == "" {
		return nil, fmt.Errorf("%s holds the workers back while it submits its backlog: give it holdfast's Redis (-redis)", scenario)
	}
	w, err := watchQueues(e.Opt.RedisURL, holdfastQueues)
	if err != nil {
		return nil, err
	}
	if err := w.pause(); err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

// seatedEvents creates n events named name for grabs grabs, grab i on
// event i mod n, each with a seat for every grab it gets.
func seatedEvents(ctx context.Context, e *Env, name string, n, grabs int) ([]*fcfsRush, error) {
	events := make([]*fcfsRush, n)
	for k := range events {
		share := grabs / n
		if k < grabs%n {
			share++
		}
		events[k] = &fcfsRush{}
		if err := events[k].open(ctx, e, fmt.Sprintf("%s %d", name, k), share, share); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// checkSeated checks each event as fcfs-rush checks its own (seats, users,
// order), and that every grab got a seat: one that ended otherwise was
// lost, refused or applied twice.
func checkSeated(ctx context.Context, e *Env, events []*fcfsRush) ([]string, error) {
	var out []string
	for _, ev := range events {
		bad, err := ev.Check(ctx, e)
		if err != nil {
			return nil, err
		}
		out = append(out, bad...)
		if won := len(ev.book.bySeat); won != ev.users {
			out = append(out, fmt.Sprintf("event %d: %d of its %d grabs got a seat, want every one", ev.eventID, won, ev.users))
		}
	}
	return out, nil
}
