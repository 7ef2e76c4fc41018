package throttle

import "github.com/chatpulse/chatpulse/chat"

// A Result answers "would one more message from this user in this room (with
// this text) be allowed now?". It marshals as docs/contract.md section 5's answer.
type Result struct {
	// Allowed is false iff an enforcing policy denies.
	Allowed bool      `json:"allowed"`
	AsOf    chat.Time `json:"as_of"` // the now of the Check
	Room    string    `json:"room"`
	User    string    `json:"user"`
	// Decisions has one per policy that sees the room, in policy order.
	// Check never leaves it nil, so it marshals as [] when there are none.
	Decisions []Decision `json:"decisions"`
	// Consumed says whether a consuming check recorded the message
	// (docs/contract.md section 10); a read-only check has none.
	Consumed *bool `json:"consumed,omitempty"`
	// Only an answer merged from a group's partitions carries it.
	*chat.Coverage
}

// A Decision is one policy's part of a Result. Count, Limit, Remaining
// and RetryAfterMs are the policy's Verdict for the key: Count is the
// messages the window holds (it can exceed Limit), or for token_bucket and
// gcra the tokens in use, with Limit then the burst; Remaining is
// max(0, Limit-Count); RetryAfterMs is 0 when Allowed, else the exact wait
// until one more message is allowed.
type Decision struct {
	Policy       string    `json:"policy"`
	Scope        Scope     `json:"scope"`
	Algorithm    Algorithm `json:"algorithm"`
	Mode         Mode      `json:"mode"`
	Allowed      bool      `json:"allowed"`
	Count        int64     `json:"count"`
	Limit        int64     `json:"limit"`
	Remaining    int64     `json:"remaining"`
	RetryAfterMs int64     `json:"retry_after_ms"`
	// Exempt: the check's user or roles are exempt from the rule, which
	// allowed it.
	Exempt bool `json:"exempt,omitempty"`
	// Until is the end of the moderator's action that denies (a timeout,
	// a slow mode), if it has one.
	Until *chat.Time `json:"until,omitempty"`
}

// Decision results, the values of the result label of
// chatpulse_throttle_decisions_total.
const (
	ResultAllowed      = "allowed"
	ResultDenied       = "denied"        // by an enforcing policy
	ResultShadowDenied = "shadow_denied" // by a shadow policy
)

// An Alert says that a key crossed an enforcing policy: At is the event
// time of its first message over the limit, and Count the key's count with
// that message. It marshals as the data of docs/contract.md section 4.
type Alert struct {
	Policy string    `json:"policy"`
	Room   string    `json:"room"`
	User   string    `json:"user"`
	Count  int64     `json:"count"`
	Limit  int64     `json:"limit"`
	At     chat.Time `json:"at"`
	// Until is the end of the penalty the crossing started, if the policy
	// has one.
	Until *chat.Time `json:"until,omitempty"`
	// Event is the id of the event that crossed (docs/contract.md section
	// 14), if it had one; a consuming check's, its id.
	Event string `json:"event,omitempty"`
	// Cost is what the message that crossed cost, under a policy that
	// weighs what messages carry (docs/contract.md section 15); 0 under
	// the others, where every message costs one.
	Cost int64 `json:"cost,omitempty"`
	// Spike is why a spike policy's room crossed; nil for the others.
	Spike *Spike `json:"spike,omitempty"`
}

// An Active entry is a key over an enforcing policy: it crossed at Since
// (its alert) and would still be denied now. It marshals as an entry of
// docs/contract.md section 3's /api/v1/throttle/active.
type Active struct {
	Policy string    `json:"policy"`
	Room   string    `json:"room"`
	User   string    `json:"user"`
	Count  int64     `json:"count"`
	Limit  int64     `json:"limit"`
	Since  chat.Time `json:"since"`
	// Until is the end of the key's penalty, while one is in force.
	Until *chat.Time `json:"until,omitempty"`
	// Spike is why a spike policy's room is over; nil for the others.
	Spike *Spike `json:"spike,omitempty"`
}
