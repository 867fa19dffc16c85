// Package domain holds holdfast's pure business vocabulary: roles, request
// statuses and the Problem error type with its stable codes. Nothing here
// performs I/O or reads the clock; callers pass time in.
package domain
