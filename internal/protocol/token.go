package protocol

import (
	crand "crypto/rand"
	"encoding/base64"
	"strings"
)

// A token is what a lock's keys hold on the nodes. It is 128 random bits
// from crypto/rand, as TokenRandomLen characters of unpadded URL-safe
// base64. When the client names an owner, "." and the owner follow. The
// scripts compare whole tokens, so the owner costs nothing beyond its bytes,
// and whoever reads a key learns who holds it.
const TokenRandomLen = 22

// NewToken returns a new token for owner ("" for none), in one allocation.
func NewToken(owner string) string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	var enc [TokenRandomLen]byte
	base64.RawURLEncoding.Encode(enc[:], b[:])
	var sb strings.Builder
	n := TokenRandomLen
	if owner != "" {
		n += 1 + len(owner)
	}
	sb.Grow(n)
	sb.Write(enc[:])
	if owner != "" {
		sb.WriteByte('.')
		sb.WriteString(owner)
	}
	return sb.String()
}

// Owner returns the owner named in token, a value read from a lock key, or
// "" when it names none.
func Owner(token string) string {
	token, _ = Holding(token)
	token = strings.TrimPrefix(token, HandPrefix) // a lock handed off on the node
	if len(token) > TokenRandomLen+1 && token[TokenRandomLen] == '.' {
		return token[TokenRandomLen+1:]
	}
	return ""
}
