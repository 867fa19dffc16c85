// Package stays is the hotel vertical (seeds 000 and 001): the catalog of
// hotels, room types and rooms; stay reservations and their staff actions;
// availability; and holds — a user's claim on a room type for a date range,
// kept in Redis with a TTL, confirmed into a reservation with a concrete room.
//
// Holds are async writes serialized per room type (key "stays:rt:{id}"). A
// hold counts against availability until the instant it expires: each night
// of each room type has a sorted set of hold ids scored by expiry, and counts
// are ZCOUNTs above "now", so no sweeper is needed for exact counts.
package stays
