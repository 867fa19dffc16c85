package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// QueueStream is an open position stream: the caller's waiting-room status
// whenever it changes (Server-Sent Events).
type QueueStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// QueueStream opens the caller's position stream of an event. While it is
// open it counts as the caller's sign of life. Close it when done; ctx
// ending closes it too. The client's transport must hand bodies over as
// they arrive (net/http's does).
func (c *Client) QueueStream(ctx context.Context, eventID int64) (*QueueStream, error) {
	resp, err := c.send(ctx, http.MethodGet, fmt.Sprintf("/api/v1/events/%d/queue/stream", eventID), nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer drain(resp)
		return nil, readError(resp)
	}
	return &QueueStream{body: resp.Body, sc: bufio.NewScanner(resp.Body)}, nil
}

// Next waits for the next status; io.EOF when the server ended the stream.
func (s *QueueStream) Next() (QueueStatus, error) {
	for s.sc.Scan() {
		data, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue // event names, keep-alive comments, retry hints, blank lines
		}
		var st QueueStatus
		if err := json.Unmarshal([]byte(data), &st); err != nil {
			return QueueStatus{}, fmt.Errorf("holdfast: queue stream: %w", err)
		}
		return st, nil
	}
	if err := s.sc.Err(); err != nil {
		return QueueStatus{}, err
	}
	return QueueStatus{}, io.EOF
}

// Close closes the stream.
func (s *QueueStream) Close() error { return s.body.Close() }
