package protocol

import (
	"fmt"
	"time"
)

// AcquireKind is what a node did with an acquire.
type AcquireKind uint8

const (
	// Granted: every key now holds the token (newly set, or already ours
	// after a lost reply).
	Granted AcquireKind = iota
	// Taken: another token holds a key.
	Taken
	// Guarded: the node is in its restart guard and grants nothing.
	Guarded
	// Gone: a key holds this token's tombstone; the round had already
	// released the node when the acquire arrived.
	Gone
	// Mismatch: the limit layer refused: the node holds the semaphore's
	// name with another limit (see layer.lua).
	Mismatch
	// WriterWaits: the limit layer refused a reader: a writer of the
	// read-write lock waits on the node.
	WriterWaits
)

// AcquireReply is a node's answer to an acquire.
type AcquireReply struct {
	Kind AcquireKind
	// Wait is, for Taken, how long until the holder's keys expire
	// (negative: a key without expiry); for Guarded, the time left in the
	// guard.
	Wait time.Duration
	// Fence is, for Granted with fencing, the node's fence counter; -1
	// when it is unknown because the node lost its data.
	Fence int64
	// StateID is, for Guarded, the id of the node's guarded state, and
	// Mark its mark ("" for none: see [Shortcut]).
	StateID, Mark string
	// Limit is, for Mismatch, the limit that the node holds.
	Limit string
}

// DecodeAcquire turns the acquire script's reply into an AcquireReply.
func DecodeAcquire(v any) (AcquireReply, error) {
	switch v := v.(type) {
	case int64:
		switch {
		case v == 0:
			return AcquireReply{Kind: Granted}, nil
		case v == -3:
			return AcquireReply{Kind: Gone}, nil
		case v > 0 || v == -1:
			return AcquireReply{Kind: Taken, Wait: time.Duration(v) * time.Millisecond}, nil
		}
	case []any:
		if len(v) >= 2 {
			code, _ := v[0].(int64)
			n, _ := v[1].(int64)
			switch {
			case code == 0 && len(v) == 2:
				return AcquireReply{Kind: Granted, Fence: n}, nil
			case code == -4 && len(v) == 2:
				limit, _ := v[1].(string)
				return AcquireReply{Kind: Mismatch, Limit: limit}, nil
			case code == -5 && len(v) == 2:
				return AcquireReply{Kind: WriterWaits, Wait: time.Duration(n) * time.Millisecond}, nil
			case code == -2 && len(v) == 4:
				id, _ := v[2].(string)
				mark, _ := v[3].(string)
				return AcquireReply{Kind: Guarded, Wait: time.Duration(n) * time.Millisecond, StateID: id, Mark: mark}, nil
			}
		}
	}
	return AcquireReply{}, fmt.Errorf("unexpected reply %v from the acquire script", v)
}

// Held reports whether v, the reply of a token-guarded script (release,
// extend, fence), is 1: every key held the token and the script did its
// work. The reply is 0 when a key is gone or holds another token.
func Held(v int64) bool { return v == 1 }

// CheckKind is what the connection check found on a server.
type CheckKind uint8

const (
	// Same: nothing suggests the server lost data since the node's state
	// was recorded (the state now holds the server's run_id and
	// replication ID).
	Same CheckKind = iota
	// Changed: the server's data may have come from elsewhere: another
	// process, or a process that was a replica since. The restart guard
	// now runs on the server, and its fence counter is unknown.
	Changed
	// NotMaster: the server is a replica; nothing was written.
	NotMaster
	// Unchecked: the server's identity could not be read (INFO denied by
	// an ACL, or absent); nothing was checked.
	Unchecked
)

// CheckReply is a server's answer to the connection check.
type CheckReply struct {
	Kind CheckKind
	// ID is the server's run_id (Same, Changed): one per process.
	ID string
	// Guard is, for Changed, how long the server's restart guard now runs.
	Guard time.Duration
	// Detail is the server's role (NotMaster) or why nothing was checked
	// (Unchecked).
	Detail string
}

// DecodeCheck turns the check script's reply into a CheckReply.
func DecodeCheck(v any) (CheckReply, error) {
	if a, ok := v.([]any); ok && len(a) >= 2 {
		code, _ := a[0].(int64)
		s, _ := a[1].(string)
		switch {
		case code == 0 && len(a) == 2:
			return CheckReply{Kind: Same, ID: s}, nil
		case code == 1 && len(a) == 3:
			ms, _ := a[2].(int64)
			return CheckReply{Kind: Changed, ID: s, Guard: time.Duration(ms) * time.Millisecond}, nil
		case code == -1 && len(a) == 2:
			return CheckReply{Kind: NotMaster, Detail: s}, nil
		case code == -2 && len(a) == 2:
			return CheckReply{Kind: Unchecked, Detail: s}, nil
		}
	}
	return CheckReply{}, fmt.Errorf("unexpected reply %v from the check script", v)
}
