// Package requests is the durable record of every accepted write: intake
// (Postgres first, then dispatch to the keyed engine), idempotency, status
// reads and the outcome notifications that long-polls wait on.
package requests
