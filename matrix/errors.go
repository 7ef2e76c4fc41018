package matrix

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Error is a request the homeserver answered with other than 2xx, or
// with a 2xx that is not what the endpoint returns.
type Error struct {
	Op      string // the request, as "PUT /_matrix/client/v3/rooms/!r:hs/redact/$e/t1"
	Status  int    // the HTTP status
	Code    string // Matrix's errcode, as M_FORBIDDEN; "" when the answer has none
	Message string // the homeserver's error, or what was wrong with its answer
	// RetryAfter is how long the homeserver asked to wait: its
	// Retry-After header, else retry_after_ms in the body; 0 if unsaid.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("matrix: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		b.WriteString(" (retry after ")
		b.WriteString(e.RetryAfter.String())
		b.WriteString(")")
	}
	return b.String()
}

// RetryAfter says whether err is the homeserver's rate limit (429, or
// M_LIMIT_EXCEEDED), and how long it asked to wait: 0 if it did not say.
func RetryAfter(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && (e.Status == http.StatusTooManyRequests || e.Code == "M_LIMIT_EXCEEDED") {
		return e.RetryAfter, true
	}
	return 0, false
}

// Forbidden says whether err is a 403: the bot lacks the power for what
// it asked, or is not in the room. Asking again changes nothing until a
// moderator of the room changes that.
func Forbidden(err error) bool { return status(err) == http.StatusForbidden }

// Unauthorized says whether err is a 401: the homeserver does not know
// the access token (M_UNKNOWN_TOKEN), or it expired. Only a new token
// helps.
func Unauthorized(err error) bool { return status(err) == http.StatusUnauthorized }

// Temporary says whether err is worth retrying with backoff: the
// homeserver failed (5xx), or the request got no answer (refused, reset,
// timed out). A 4xx is not temporary: the same request gets the same
// answer (RetryAfter says when a 429 may be retried). Neither is a
// request the caller canceled, nor a certificate the client cannot
// trust.
func Temporary(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500 && e.Status <= 599
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid) {
		return false
	}
	var ne *netError
	var n net.Error
	return errors.As(err, &ne) || errors.As(err, &n)
}

func status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// netError is a request that got no answer, or not all of one.
type netError struct {
	op  string
	err error
}

func (e *netError) Error() string { return "matrix: " + e.op + ": " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// Bounds of what an Error keeps of an answer: enough to read, never a
// page of HTML in a log line.
const (
	maxCode    = 64
	maxMessage = 512
)

// errorOf is the Error of an answer with status, header h and body
// (already cut at MaxBody), sent with secret as its access token: the
// token is taken out of every text kept, whatever the homeserver echoed.
//
// The body is Matrix's standard error, {"errcode", "error",
// "retry_after_ms"}; keys are matched exactly, and a key of the wrong
// type is as if absent. A body that is not that keeps a cleaned excerpt
// as the message (a proxy's HTML page, say), else the status's text.
func errorOf(op string, status int, h http.Header, body []byte, secret string) *Error {
	e := &Error{Op: op, Status: status}
	var fields map[string]json.RawMessage
	var code, message string
	var ms float64
	hasMs := false
	if json.Unmarshal(body, &fields) == nil {
		_ = json.Unmarshal(fields["errcode"], &code)
		_ = json.Unmarshal(fields["error"], &message)
		hasMs = json.Unmarshal(fields["retry_after_ms"], &ms) == nil && fields["retry_after_ms"] != nil
	} else if len(body) > 0 {
		message = string(body)
	}
	e.Code = clean(code, secret, maxCode)
	e.Message = clean(message, secret, maxMessage)
	if e.Message == "" && e.Code == "" {
		e.Message = http.StatusText(status)
	}
	if d, ok := retryAfterHeader(h); ok {
		e.RetryAfter = d
	} else if hasMs {
		e.RetryAfter = millis(ms)
	}
	return e
}

// retryAfterHeader reads Retry-After (RFC 9110 section 10.2.3): seconds,
// or an HTTP-date, measured from the answer's own Date so that no clock
// is read here. A date without a Date to measure it from is unsaid.
func retryAfterHeader(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseUint(v, 10, 64); err == nil {
		if s > math.MaxInt64/uint64(time.Second) {
			return math.MaxInt64, true
		}
		return time.Duration(s) * time.Second, true
	}
	when, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return 0, false
	}
	return max(0, when.Sub(date)), true
}

// millis is retry_after_ms as a Duration: never negative, and saturated
// where a Duration ends (292 years) rather than wrapped.
func millis(ms float64) time.Duration {
	switch {
	case !(ms > 0): // and NaN
		return 0
	case ms >= float64(math.MaxInt64/int64(time.Millisecond)):
		return math.MaxInt64
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// clean makes s fit for one line of a log: secret taken out (first, so
// that no cut leaves a piece of it), valid UTF-8, control characters as
// spaces, at most max bytes. A secret is printable ASCII (checkToken), so
// no new one can span the non-ASCII marks that stand in its place.
func clean(s, secret string, max int) string {
	if secret != "" {
		s = strings.ReplaceAll(s, secret, "‹token›")
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
