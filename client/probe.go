package client

import (
	"context"
	"net/http"
)

// ProbeResult is the result of a probe write: each counter's new value.
type ProbeResult struct {
	Values map[string]int64 `json:"values"`
}

// Probe increments the probe counters keys, all or none (result
// ProbeResult). Each counter is a serialization key of its own, so a probe
// on a name never used before is a write on a new key. The API and the
// worker serve it only with HOLDFAST_PROBE=true.
func (c *Client) Probe(ctx context.Context, keys []string, opts ...WriteOption) (Accepted, error) {
	body := struct {
		Keys []string `json:"keys"`
	}{keys}
	return c.Submit(ctx, http.MethodPost, "/api/v1/probe", body, opts...)
}
