// Package requests is the durable record of every accepted write: intake
// (Postgres first, then dispatch to the keyed engine), idempotency, status
// reads, and the announcement of outcomes (DoneMessage) that the API's
// long polls wait on.
package requests
