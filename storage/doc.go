// Package storage opens holdfast's connections (Postgres through pgx v5,
// Redis through go-redis v9), applies the embedded migrations and translates
// driver errors into domain errors in one place.
package storage
