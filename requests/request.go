package requests

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/domain"
)

// Request is one accepted write as stored in Postgres.
type Request struct {
	ID          uuid.UUID
	Seq         int64
	Type        string
	Queue       string
	UserID      string
	Keys        []string
	Payload     json.RawMessage
	TraceID     string
	Status      domain.Status
	Result      json.RawMessage
	Problem     *domain.Problem
	AcceptedAt  time.Time
	CompletedAt *time.Time
}

// Outcome is what applying a request produced.
type Outcome struct {
	Status  domain.Status
	Result  any
	Problem *domain.Problem
}

// Succeeded is a successful outcome carrying result.
func Succeeded(result any) Outcome { return Outcome{Status: domain.StatusSucceeded, Result: result} }

// Rejected is a business "no": the error the synchronous API would have given.
func Rejected(p *domain.Problem) Outcome { return Outcome{Status: domain.StatusRejected, Problem: p} }

// Reject is the outcome of a request a business rule refused: code, with its
// status from domain's table, and a message (fmt verbs allowed).
func Reject(code, format string, args ...any) Outcome {
	return Rejected(domain.NewProblem(code, format, args...))
}

// Failed is a system failure after retries.
func Failed(msg string) Outcome {
	return Outcome{Status: domain.StatusFailed, Problem: domain.NewProblem(domain.CodeInternal, "%s", msg)}
}

// View is the JSON shape of GET /api/v1/requests/{id} (SPEC §2).
type View struct {
	RequestID   string          `json:"requestId"`
	Type        string          `json:"type"`
	Status      domain.Status   `json:"status"`
	AcceptedAt  time.Time       `json:"acceptedAt"`
	CompletedAt *time.Time      `json:"completedAt"`
	Result      json.RawMessage `json:"result"`
	Error       *domain.Problem `json:"error"`
}

// View renders r for clients.
func (r *Request) View() View {
	v := View{RequestID: r.ID.String(), Type: r.Type, Status: r.Status, AcceptedAt: r.AcceptedAt.UTC(),
		CompletedAt: r.CompletedAt, Result: r.Result, Error: r.Problem}
	if v.CompletedAt != nil {
		t := v.CompletedAt.UTC()
		v.CompletedAt = &t
	}
	if len(v.Result) == 0 {
		v.Result = json.RawMessage("null")
	}
	return v
}
