// Package fencedsql shows how a resource behind PostgreSQL refuses a late
// writer with a stampede lock's fencing number: a holder passes
// (*lock.Lock).Fence with its writes, and the database keeps, per
// resource, the highest number that wrote; a write carrying a lower one
// is refused in the transaction that would have made it. Read Example,
// then Write; docs/locks.md ("Fenced writes in SQL") explains the SQL.
//
// It is a module of its own so that the PostgreSQL driver stays out of
// the stampede module's dependencies; it is not published.
package fencedsql
