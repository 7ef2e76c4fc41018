package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
)

// Parameter limits of contract section 3.
const (
	defaultK     = 10
	maxK         = aggregator.MaxK
	defaultLimit = 50
	maxLimit     = 1000
	maxCheckBody = 64 << 10
)

// badRequest is an error the client made: HTTP 400, a micro error "400".
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// windowName resolves a window parameter against the configured windows:
// "" is the default, the first.
func windowName(name string, configured []string) (string, error) {
	if name == "" {
		return configured[0], nil
	}
	if !slices.Contains(configured, name) {
		return "", fmt.Errorf("%w %q; configured: %s", aggregator.ErrUnknownWindow, name, strings.Join(configured, ", "))
	}
	return name, nil
}

// intParam parses an optional integer parameter in [1, most].
func intParam(name, v string, def, most int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, badf("%s must be an integer 1..%d, got %q", name, most, v)
	}
	return n, nil
}

// checkRequest is the body of a throttle check (contract section 5).
type checkRequest struct {
	Room string  `json:"room"`
	User string  `json:"user"`
	Text *string `json:"text"`
}

// decodeCheck parses and validates a check request, over HTTP or NATS.
func decodeCheck(data []byte) (checkRequest, error) {
	var req checkRequest
	if len(data) > maxCheckBody {
		return req, badf("request body over %d bytes", maxCheckBody)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, badf(`request must be a JSON object {"room": string, "user": string, "text": string (optional)}: %v`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, badf("request must be one JSON object, with nothing after it")
	}
	if err := checkName("room", req.Room); err != nil {
		return req, err
	}
	return req, checkName("user", req.User)
}

// checkName is chat.CheckName, refusing a bad name as a bad request.
func checkName(what, name string) error {
	if err := chat.CheckName(what, name); err != nil {
		return &badRequest{err.Error()}
	}
	return nil
}
