package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxBody bounds what is read of an answer. A Matrix event is at most
// 64 KiB (spec: "Size limits"), so no power levels or join rules come
// near it, and an error is a few hundred bytes: more is not a homeserver
// answering this API.
const MaxBody = 1 << 20

// Client acts as one bot account on one homeserver. It is safe for
// concurrent use; each method is one request, never retried here.
type Client struct {
	base  string // the homeserver's URL, escaped, without a trailing slash
	token func() string
	hc    *http.Client
}

// NewClient is a client of the homeserver at the http(s) URL homeserver
// (its base, as https://matrix.example.org, without /_matrix), acting
// with the access token that token returns. token is called for every
// request, so a token read again from its file (on SIGHUP) is used from
// the next request on; surrounding space is ignored. hc nil is a client
// with timeouts (30 s a request) that follows no redirect: a homeserver
// does not move its API, and a redirect is where a token could leak.
func NewClient(homeserver string, token func() string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(homeserver)
	if err != nil {
		return nil, fmt.Errorf("matrix: homeserver %q: %w", homeserver, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("matrix: homeserver %q: not an http(s) URL", homeserver)
	case u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("matrix: homeserver %q: no host", homeserver)
	case u.User != nil:
		return nil, fmt.Errorf("matrix: homeserver %q: a URL with credentials (the token goes in its own file)", u.Redacted())
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("matrix: homeserver %q: a URL with a query or fragment", homeserver)
	case strings.Contains(u.Path, "/_matrix"):
		return nil, fmt.Errorf("matrix: homeserver %q: give the homeserver's base URL, without /_matrix/...", homeserver)
	}
	if token == nil {
		return nil, errors.New("matrix: no token function")
	}
	if hc == nil {
		hc = defaultHTTPClient()
	}
	base := u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
	return &Client{base: base, token: token, hc: hc}, nil
}

// defaultHTTPClient bounds every step of a request: connecting, TLS, the
// wait for an answer's header, and the whole request. The act queue's
// own context is usually tighter; these catch a caller that set none.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 20 * time.Second
	t.MaxIdleConnsPerHost = 16 // acts come in bursts: a raid, a flood
	return &http.Client{
		Transport:     t,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// WhoAmI is the user id of the token's account.
func (c *Client) WhoAmI(ctx context.Context) (userID string, err error) {
	var out struct {
		UserID string `json:"user_id"`
	}
	op, err := c.do(ctx, http.MethodGet, nil, &out, "account", "whoami")
	if err == nil && out.UserID == "" {
		err = &Error{Op: op, Status: http.StatusOK, Message: "the answer has no user_id"}
	}
	return out.UserID, err
}

// PowerLevels is room's m.room.power_levels content.
func (c *Client) PowerLevels(ctx context.Context, room string) (*PowerLevels, error) {
	var body json.RawMessage
	op, err := c.do(ctx, http.MethodGet, nil, &body, stateSegments(room, "m.room.power_levels")...)
	if err != nil {
		return nil, err
	}
	pl, err := ParsePowerLevels(body)
	if err != nil {
		return nil, &Error{Op: op, Status: http.StatusOK, Message: err.Error()}
	}
	return pl, nil
}

// SetPowerLevels makes pl room's power levels, and returns the id of the
// state event that did. The homeserver refuses (403) unless the bot's
// level is at least events["m.room.power_levels"] and at least every
// level it changes, before and after.
func (c *Client) SetPowerLevels(ctx context.Context, room string, pl *PowerLevels) (eventID string, err error) {
	body, err := pl.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("matrix: power levels of %s: %w", room, err)
	}
	return c.sendState(ctx, room, "m.room.power_levels", body)
}

// JoinRules is room's m.room.join_rules content, as the homeserver
// answered it: given back to SetJoinRules, it restores every key.
func (c *Client) JoinRules(ctx context.Context, room string) (json.RawMessage, error) {
	var body json.RawMessage
	op, err := c.do(ctx, http.MethodGet, nil, &body, stateSegments(room, "m.room.join_rules")...)
	if err != nil {
		return nil, err
	}
	if !isObject(body) {
		return nil, &Error{Op: op, Status: http.StatusOK, Message: "join rules are not a JSON object"}
	}
	return body, nil
}

// SetJoinRules makes content, a JSON object, room's join rules, and
// returns the id of the state event that did. {"join_rule":"invite"}
// locks a room: only the invited can join.
func (c *Client) SetJoinRules(ctx context.Context, room string, content json.RawMessage) (eventID string, err error) {
	if !isObject(content) {
		return "", fmt.Errorf("matrix: join rules of %s: not a JSON object", room)
	}
	return c.sendState(ctx, room, "m.room.join_rules", content)
}

// Redact redacts event in room, with reason ("" for none), and returns
// the id of the redaction event. txnID names this redaction: sent again
// with the same token, as a retry does, it is done once and answered
// with the same id. The homeserver remembers a transaction per access
// token (and, for a while, Dendrite per URL too), so a retry after the
// token changed may redact twice: harmless, a redaction of a redacted
// event changes nothing.
func (c *Client) Redact(ctx context.Context, room, event, reason, txnID string) (eventID string, err error) {
	if txnID == "" {
		return "", fmt.Errorf("matrix: redact %s in %s: no transaction id", event, room)
	}
	body := []byte("{}")
	if reason != "" {
		body, _ = json.Marshal(map[string]string{"reason": reason})
	}
	return c.sendEvent(ctx, http.MethodPut, body, "rooms", room, "redact", event, txnID)
}

// stateSegments are the path of the state event of type evType with the
// empty state key: .../state/{eventType}/ with nothing after the slash.
func stateSegments(room, evType string) []string {
	return []string{"rooms", room, "state", evType, ""}
}

func (c *Client) sendState(ctx context.Context, room, evType string, content []byte) (string, error) {
	return c.sendEvent(ctx, http.MethodPut, content, stateSegments(room, evType)...)
}

// sendEvent makes a request whose answer is {"event_id"}, and returns the
// id.
func (c *Client) sendEvent(ctx context.Context, method string, body []byte, segments ...string) (string, error) {
	var out struct {
		EventID string `json:"event_id"`
	}
	op, err := c.do(ctx, method, body, &out, segments...)
	if err == nil && out.EventID == "" {
		err = &Error{Op: op, Status: http.StatusOK, Message: "the answer has no event_id"}
	}
	return out.EventID, err
}

// do makes one request to /_matrix/client/v3/ and the segments, each
// escaped, with body as JSON, and decodes a 2xx answer into out (a
// *json.RawMessage takes it as it came). It returns the request, as
// errors name it.
func (c *Client) do(ctx context.Context, method string, body []byte, out any, segments ...string) (op string, err error) {
	path := "/_matrix/client/v3"
	for _, s := range segments {
		path += "/" + escape(s)
	}
	op = method + " " + path
	for _, s := range segments[:len(segments)-1] { // the last may be an empty state key
		if s == "" {
			return op, fmt.Errorf("matrix: %s: an empty room or event id", op)
		}
	}
	token := strings.TrimSpace(c.token())
	if err := checkToken(token); err != nil {
		return op, fmt.Errorf("matrix: %s: %w", op, err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return op, fmt.Errorf("matrix: %s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is op's
		}
		return op, &netError{op, err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return op, &netError{op, fmt.Errorf("%s, then: %w", resp.Status, err)}
	}
	tooLarge := len(data) > MaxBody
	if tooLarge {
		data = data[:MaxBody]
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := errorOf(op, resp.StatusCode, resp.Header, data, token)
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
			e.Message = clean("redirected to "+loc+": the homeserver's URL may be that one", token, maxMessage)
		}
		return op, e
	}
	if tooLarge {
		return op, &Error{Op: op, Status: resp.StatusCode, Message: fmt.Sprintf("the answer is larger than %d bytes", MaxBody)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return op, &Error{Op: op, Status: resp.StatusCode, Message: clean("the answer is not the JSON expected: "+err.Error(), token, maxMessage)}
	}
	return op, nil
}

// escape escapes s as one path segment. It keeps what Matrix ids are made
// of and RFC 3986 lets stand in a segment (letters, digits, -._~ and
// !$:@), and encodes every other byte: a '/' or a '+' in an old room's
// event id, a '?' or a '#' anywhere.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$:@", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// checkToken says what is wrong with an access token, never what it is.
// Tokens are opaque, but printable ASCII without spaces (RFC 6750's
// b64token is narrower): anything else cannot go in a header intact.
func checkToken(token string) error {
	if token == "" {
		return errors.New("no access token")
	}
	for i := 0; i < len(token); i++ {
		if token[i] < 0x21 || token[i] > 0x7e {
			return fmt.Errorf("the access token has a byte that cannot go in a header (at %d of %d)", i, len(token))
		}
	}
	return nil
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}
