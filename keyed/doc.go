// Package keyed applies accepted requests with per-key serialization
// (SPEC §3, properties K1–K6). Every write type declares its keys; this
// package is the one place that turns those keys into mutual exclusion,
// order (K3), isolation, crash recovery and batching.
//
// # Reading order
//
// An hour's reading, the protocol first and the speed-ups after:
//
//  1. This comment: the protocol, groups, forgetting, and the measured
//     choices at its end.
//  2. requests/intake.go: Accept, the API's side: the caps (Admit),
//     storing (the group commit of requests/group.go; read it as one
//     INSERT), Post and Enqueue, and the undispatched mark when they fail.
//     requests/store.go holds the statements the protocol runs: LockOpen,
//     Complete, UndispatchedBefore, the reconciler's.
//  3. engine.go: what a write type gives (Type, Applier, Batch);
//     handleRequest is the task handler, and it only calls Drain.
//     dispatch.go: Post and Enqueue, and when a task is deferred
//     (deferral; how, in deferred.go); admit.go: the caps. each.go: Each,
//     the apply loop of write types that decide one request at a time.
//  4. lease.go and scripts.go: a lease and its token (acquire, reissue),
//     the fence every apply transaction checks (fence), the Redis layout
//     and its scripts (evalAll runs one for many keys in a round trip),
//     and FenceCheck for appliers' own scripts.
//  5. drain.go: Drain and drainHeld, the loop a holder runs until its
//     mailboxes are empty or its slice is up; finish, lostLease, keepAlive.
//     Quiet waiting is behind one seam, g.wait (the waiting interface in
//     waiting.go): its implementation for waiting plain does nothing but
//     pause between looks, so skip those calls on a first reading;
//     waiting.go, after the protocol, explains them.
//  6. group.go with apply.go: one step of that loop over every key the
//     drain holds (peek, merge, apply, and then take the keys its blocked
//     requests want), how keys held elsewhere are waited for without
//     deadlock, and how keys are given up (giveUp: handed on, or yielded
//     to another drain). A step's plan is filled by its pick (picker),
//     which runs inside the apply transaction (attempt, in apply.go), on
//     the rows it locked; applyRetrying is what happens when that fails
//     (re-issue, retry, halve, record as failed).
//  7. reconcile.go and forget.go: recovery from lost Redis state and dead
//     holders (Reconcile, Redispatch; renew keeps K3 across a loss of
//     Redis' state), and how fencing state is let go.
//  8. The speed-ups, each apart from the protocol: deferred.go,
//     waiting.go, requests/group.go (below).
//
// The words for a drain letting a key go, as the code uses them:
//
//   - release: its lease is deleted in Redis (releaseScript, checking the
//     token), atomically with finding the mailbox empty (releaseEmpty), or
//     whatever the mailbox holds (giveUp, release);
//   - hand on: release with a drain task for the entries left (leave at a
//     slice's end, on shutdown or an error; roomFor);
//   - yield: release keeping the key for promiseTTL for the holder of a
//     blocked request's smallest key, the claim it must show to take it
//     (the key's "for" entry: a promise), with a drain task a second later
//     (yield);
//   - give away and take (quiet waiting only): the leases move to another
//     drain of the same worker without a release (waiting.go).
//
// Throughput mechanisms outside the protocol, each with a switch
// (docs/configuration.md) and its measured gain beside its code: deferred.go
// (deferred tasks folded, AGGREGATE_DEFERRED_TASKS), the intake's group
// commit (requests/group.go, GROUP_COMMIT), batched Asynq enqueues
// (storage/batch.go, BATCH_ENQUEUE), the announced outcomes that let
// long polls answer without Postgres (api/notify.go and await in
// api/requests.go, ANNOUNCED_VIEWS), and quiet waiting (waiting.go,
// QUIET_WAITING: a drain that waits for keys looks again with Redis alone,
// a yield wakes it, a drain that wants a key a parked drain of its worker
// holds takes that drain's whole group over, and a drain that would yield
// to another drain of its worker gives it its whole group instead). None
// of them is needed for K1–K6: make test runs
// the protocol's tests again with every one of them off
// (HOLDFAST_TEST_SPEEDUPS=off, internal/testenv/speedups.go). Groups
// (group.go) are part of the protocol: they are how a request with several
// keys is applied at all.
//
// # The protocol
//
//   - Intake stores the request in Postgres, which gives it seq: a request
//     sent after another's 202 reached its client gets a higher seq (K3's
//     order); requests in flight together may commit out of seq order and
//     have no order between them. Then it adds the id to a mailbox per key —
//     a Redis sorted set scored by seq — and enqueues one Asynq task with
//     TaskID = requestId (K1).
//   - A task tries to take the lease of its request's first key: a Redis string
//     holding a fencing token (Forgetting, below) with a TTL. If the
//     lease is held, the holder will apply the request (it gives the lease
//     up only atomically with finding the mailbox empty, or with a drain
//     task for what is left in it), so the task is done:
//     a hot key never ties up more than one worker slot (K4).
//   - The holder applies its mailbox in seq order (K3), in batches of up to
//     BatchMax requests per Postgres transaction (K6). That transaction locks
//     the request rows and skips any that are already terminal, so no
//     request is applied twice (K5). Before it applies any, it records the
//     lease token of each of their keys in key_fences and is refused if a
//     newer token is already there, so a holder that lost its lease cannot
//     commit (K2). Each request gets its own outcome.
//   - A request with several keys is applied by a drain that holds all of
//     them, in a batch with the others of those keys (Groups, below). Every
//     key lives in its own hash slot, so this works on Redis Cluster.
//   - A holder drains for at most DrainSlice, then releases the lease and hands
//     the key to a new drain task, so shutdown and long backlogs hand work back.
//   - A request far behind a long backlog on its key, or one that found its
//     key held as it entered the mailbox, gets its task deferred rather than
//     pending (folded or scheduled: deferred.go): the holder applies it in
//     order anyway, one hot key's tasks then never fill the pending list
//     ahead of other keys (K4), and during a rush the worker's slots and
//     Redis go to the drain, not to tasks with nothing to do. A request
//     none of whose keys is held has its task due at once; one with a key
//     held is left to that holder, whose group gathers its other keys (or
//     makes way for the drain that does).
//   - A holder keeps its lease alive while a transaction runs. Transient
//     failures (connections, deadlocks, Redis) are retried and then handed to
//     a later task; an applier that keeps failing is narrowed down by halving
//     the batch until the one request responsible is recorded as failed.
//   - The reconciler (SPEC §7) looks in Postgres for requests that stayed open
//     longer than RedriveAfter; for each of their keys it restores mailbox
//     entries and tasks Redis lost, and for keys without a live lease it
//     enqueues a drain (the holder died). Lease TTL + reconcile interval bound
//     K5. A request whose dispatch failed at intake is marked undispatched, and
//     no batch on its keys is applied past it until it is back in order (K3).
//     So is every open request once Redis lost its state: a step reads the
//     incarnation of Redis' state right after its peeks, and a drain that
//     finds none marks them before anything is applied (renew, in
//     reconcile.go).
//
// # Groups
//
// A drain holds a group of keys: the one its task named, and the keys of the
// requests it meets there (a cart's other options, its user). Each step it
// reads the head of every held key's mailbox (one pipelined round trip),
// merges them by seq and, in one transaction fenced on the keys of what it
// applies, applies in seq order every request that it can:
//
//   - a request is applied when the group holds all of its keys, each key's
//     window reaches it, and no earlier request sharing a key with it was
//     left out. For each key the applied requests are then a prefix of its
//     mailbox: K3 holds per key, and requests on disjoint keys do not wait
//     for each other. A hot key's backlog goes in batches of BatchMax even
//     when each request also carries keys of its own (K6).
//   - the keys of the requests it left out for want of a key are then tried
//     (one pipelined round trip, never waiting: no drain ever waits for a
//     lease while holding one, so there is no deadlock). A key it got joins
//     the group, and its requests go in the next step's batch.
//   - a key held elsewhere: the drain holding a blocked request's smallest
//     key keeps its keys and tries again every few milliseconds; any other
//     drain gives that request's keys up, each kept for a moment for the
//     drain holding that smallest key (whichever of its requests it wants
//     it for), so no third drain takes it and bounces it on; a drain task
//     follows a second later, should the holder of the smallest key leave.
//     Keys are totally ordered, so the blocked request whose smallest key
//     is smallest of all always has a holder that waits for nobody who
//     waits for it: someone always goes on, and the group that holds a
//     request's smallest key ends up with all of its keys. (Waiting
//     quietly, a drain that wants a key held by a drain of its worker that
//     waits parked takes that drain's whole group over instead, when it
//     has room for it, and one that would yield to a drain of its worker
//     gives it its whole group: waiting.go.)
//     This is where holdfast parts from SPEC K2's "no hold-and-wait", on
//     purpose: the holder of the smallest key holds while it tries for
//     the rest. It never blocks on a lease, and the keys' total order
//     (SPEC's "sorted order") is what rules out a deadlock, the others'
//     yielding what a blocked request needs is what lets it go on.
//   - a key whose mailbox is found empty leaves the group, atomically with
//     finding it so; at DrainSlice, on shutdown or on an error every key is
//     handed on, each with a drain task if its mailbox has entries.
//
// A group is bounded by 2·BatchMax+64 keys, and a request by 64
// (requests.MaxKeys, refused at intake above it; the shop bounds a cart to
// 50 options for this): a request with more keys than a group may hold
// would never be applied, and every request behind it on one of its keys
// would wait with it. When the keys still lacking for the first request a
// group gathers do not fit beside those it holds, the group hands on the
// keys that request does not name (roomFor), so the request's keys always
// fit, however small BatchMax is. Every key of the requests a transaction
// applies is fenced in it (one statement for all of them), so a group that
// lost the lease of any of them cannot commit (K2); the keys it holds for
// requests it does not apply yet are not written, so the transaction does
// not check them (a long-tail option held beside hot ones is not rewritten
// at every step). A lost lease ends the drain, and its keys are handed on
// (K5 as before: leases lapse, the reconciler re-drives).
//
// # Forgetting
//
// A key's fencing state lives only while the key is in use, however many
// keys the system has seen (every shopper is a key):
//
//   - A token is Redis' clock in microseconds at the acquire (TIME in the
//     acquire script), or one more than the key's last token if that is
//     higher. The key's Redis fence holds its last token and expires
//     ForgetAfter (an hour) after the last acquire.
//   - An apply transaction's fence (key_fences) accepts a token only if it
//     is no lower than the row's and newer than floor = Postgres' now −
//     ForgetAfter. A row whose token is below floor is deleted by Forget,
//     a periodic task; the delete checks the token again on the row it
//     deletes, so a row an apply raised meanwhile stays.
//
// Why a holder that stalled past its lease still cannot commit after a
// newer holder did (K2), with the row gone or re-created: the newer holder
// took the key after the stalled one's lease lapsed, so its token is
// higher: the Redis fence still held the stalled one's token (and the new
// one is at least one more), or it had expired, ForgetAfter after the
// stalled holder's acquire, and the new token is Redis' clock an hour
// later. While the row lasts it holds the newer token, which refuses the
// stalled one. The row goes only once its token, higher than the stalled
// holder's, is below floor; floor only grows, so from then on the stalled
// token is below floor and refused whether or not a new row exists. Both
// comparisons use Postgres' clock, so the argument does not depend on the
// clocks of Redis and Postgres agreeing. What it needs of Redis' clock is
// that it does not step back by more than ForgetAfter while a key is idle;
// a legitimate holder it puts below floor (a Redis clock far behind) is
// refused, finds its lease still its own, and is re-issued a token above
// floor, as after a Redis that lost its fences. A key's progress mark
// (key_progress) goes once it is below every open request: it then says
// nothing about any request.
//
// # Choices, measured (a cart rush: 3,000 carts of one or two of five hot
// options, 200 clients; make bench, BENCH_ONLY=cart)
//
//   - Groups instead of one request at a time: the worker makes 0.22
//     Postgres statements and 0.10 Redis round trips a reserve, from 23.9
//     and 13.8 (shop.TestReserveRoundTrips), and the rush went from 51 to
//     about 2,000–3,000 reserves a second.
//   - The shop keeps the user's key on a reserve, though its options alone
//     would serialize the stock: a confirm or release holds only the user's
//     key, and the reserve → confirm order of one user, and "one live
//     reservation a user" (seed 002), are decided under it. A product-level
//     key instead would serialize unrelated options of one product. A user
//     key costs one acquire in a pipelined round trip the group makes
//     anyway, and nothing when its mailbox empties with the batch.
//   - A kept key goes to the group holding the key it is kept for, not only
//     to one claiming it for the same request: with the narrower rule a
//     rush's first wave waited out the whole promise (p99 600 ms against
//     100 ms; TestAKeyKeptForAHeldKeyGoesToItsGroup).
package keyed
