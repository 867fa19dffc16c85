package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/holdfast/holdfast/client"
)

// baseline-fcfs drives cmd/baseline's lean mode, not holdfast: the
// synchronous FCFS a team would build from seed 004, measured by make bench
// with the same clients, at the same concurrency, as fcfs-rush.

// plainPost sends a JSON POST as user and returns the status and body.
func plainPost(ctx context.Context, e *Env, path, user string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(e.Opt.BaseURL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := e.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp.StatusCode, rb, err
}

// baselineFCFS: Users users each ask the synchronous server once for a seat
// (POST /api/v1/seats/reservation/fcfs, answered 200 with the seed's body).
type baselineFCFS struct {
	seats, users int
	book         *seatBook
}

func (s *baselineFCFS) Setup(_ context.Context, e *Env) (int, error) {
	s.seats, s.users = orDefault(e.Opt.Seats, 1000), orDefault(e.Opt.Users, 2000)
	s.book = newSeatBook()
	return s.users, nil
}

func (s *baselineFCFS) Journey(ctx context.Context, e *Env, i int) error {
	user := fmt.Sprintf("%s-%d", e.RunID, i)
	start := time.Now()
	status, body, err := plainPost(ctx, e, "/api/v1/seats/reservation/fcfs", user, map[string]string{"phone": fmt.Sprintf("+8210%08d", i)})
	took := time.Since(start)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, body)
	}
	var r struct {
		Success bool    `json:"success"`
		SeatID  *int64  `json:"seat_id"`
		Reason  *string `json:"reason"`
	}
	if err == nil {
		err = json.Unmarshal(body, &r)
	}
	if err != nil {
		e.Rec.SubmitError("fcfs.sync", err)
		return err
	}
	// A synchronous answer is its own outcome: accepted and terminal at once.
	e.Rec.Accepted("fcfs.sync", start, took)
	out := client.Outcome{Status: client.StatusSucceeded}
	switch {
	case r.Success && r.SeatID != nil:
		s.book.won(user, *r.SeatID)
	case r.Reason != nil && *r.Reason == "sold_out":
		s.book.sold()
		out = client.Outcome{Status: client.StatusRejected, Problem: &client.Error{Code: "SOLD_OUT"}}
	case r.Reason != nil:
		out = client.Outcome{Status: client.StatusRejected, Problem: &client.Error{Code: strings.ToUpper(*r.Reason)}}
	}
	e.Rec.Terminal("fcfs.sync", start, out)
	return nil
}

// Check verifies what the clients were told: no seat twice, no user twice,
// no more seats than exist. The server's own tables are not read; false
// sold-outs (SOLD_OUT while seats were left) show in the outcome counts.
func (s *baselineFCFS) Check(context.Context, *Env) ([]string, error) {
	out := s.book.bad.all()
	if won := len(s.book.bySeat); won > s.seats {
		out = append(out, fmt.Sprintf("oversold: %d seats given for %d", won, s.seats))
	}
	return out, nil
}
