package requests

import (
	"encoding/json"
	"fmt"
	"strings"
)

// DoneChannel is the Redis pub/sub channel on which workers announce the
// requests that just became terminal, one message per batch. It only speeds
// up long-polls: a poll that misses it re-reads Postgres.
const DoneChannel = "holdfast:requests:done"

// DoneMessage announces that reqs are terminal, as Complete left them: one
// line per request, its id, a space and the view GET would now read from
// Postgres, so a waiting long-poll can answer without reading it again.
func DoneMessage(reqs []*Request) (string, error) {
	var b strings.Builder
	for _, r := range reqs {
		v, err := json.Marshal(r.View())
		if err != nil {
			return "", fmt.Errorf("requests: announce %s: %w", r.ID, err)
		}
		fmt.Fprintf(&b, "%s %s\n", r.ID, v)
	}
	return b.String(), nil
}
