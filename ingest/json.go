package ingest

import "fmt"

// scanner reads the JSON payload data from i on. Its methods check and skip
// JSON values, and report every fault as a malformed *Error that names the
// byte it lies at; what the values mean is the decoder's.
type scanner struct {
	data []byte
	i    int // next byte to read
}

// skip checks and skips the JSON value at sc.i, which lies inside depth
// containers. It keeps its own stack of open containers in a bit set (1:
// object), not the Go stack, so no payload can exhaust that.
func (sc *scanner) skip(depth int) *Error {
	data := sc.data
	var objects uint64
	open := 0
	i := sc.i
	for {
		// A value starts at i.
		if i >= len(data) {
			return sc.syntax(i, "unexpected end of input looking for a value")
		}
		switch c := data[i]; c {
		case '{', '[':
			if depth+open >= MaxDepth {
				return &Error{ReasonMalformed, fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxDepth, i)}
			}
			i = skipWS(data, i+1)
			if i < len(data) && (c == '{' && data[i] == '}' || c == '[' && data[i] == ']') {
				i++
				break
			}
			if c == '[' {
				objects &^= 1 << open
				open++
				continue
			}
			objects |= 1 << open
			open++
			_, next, err := sc.str(i)
			if err != nil {
				return err
			}
			if i, err = sc.colon(next); err != nil {
				return err
			}
			continue
		case '"':
			_, next, err := sc.str(i)
			if err != nil {
				return err
			}
			i = next
		case 't', 'f', 'n':
			lit := "null"
			if c == 't' {
				lit = "true"
			} else if c == 'f' {
				lit = "false"
			}
			sc.i = i
			if err := sc.literal(lit); err != nil {
				return err
			}
			i = sc.i
		default:
			if c != '-' && !isDigit(c) {
				return sc.unexpected(i, "looking for a value")
			}
			sc.i = i
			if _, err := sc.number(); err != nil {
				return err
			}
			i = sc.i
		}
		// A value ended before i: close containers until one has a next
		// element, or the value at sc.i is done.
		for {
			if open == 0 {
				sc.i = i
				return nil
			}
			i = skipWS(data, i)
			inObject := objects&(1<<(open-1)) != 0
			if i < len(data) && data[i] == ',' {
				i = skipWS(data, i+1)
				if inObject {
					_, next, err := sc.str(i)
					if err != nil {
						return err
					}
					if i, err = sc.colon(next); err != nil {
						return err
					}
				}
				break
			}
			if i < len(data) && (inObject && data[i] == '}' || !inObject && data[i] == ']') {
				i++
				open--
				continue
			}
			if inObject {
				return sc.unexpected(i, "after object field value")
			}
			return sc.unexpected(i, "after array element")
		}
	}
}

// colon expects optional whitespace, ':' and optional whitespace after an
// object key ending before i, and returns the index of the value.
func (sc *scanner) colon(i int) (int, *Error) {
	i = skipWS(sc.data, i)
	if i >= len(sc.data) || sc.data[i] != ':' {
		return i, sc.unexpected(i, "after object key")
	}
	return skipWS(sc.data, i+1), nil
}

// number scans a JSON number at sc.i and reports whether it is written as an
// integer (no fraction, no exponent).
func (sc *scanner) number() (integer bool, err *Error) {
	data, i := sc.data, sc.i
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	default:
		return false, sc.unexpected(i, "in number")
	}
	integer = true
	if i < len(data) && data[i] == '.' {
		integer = false
		if i++; i >= len(data) || !isDigit(data[i]) {
			return false, sc.unexpected(i, "after decimal point in number")
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		integer = false
		if i++; i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return false, sc.unexpected(i, "in exponent of number")
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	sc.i = i
	return integer, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// literal expects the literal lit (true, false or null) at sc.i.
func (sc *scanner) literal(lit string) *Error {
	for j := 0; j < len(lit); j++ {
		if sc.i+j >= len(sc.data) || sc.data[sc.i+j] != lit[j] {
			return sc.unexpected(sc.i+j, "in literal "+lit)
		}
	}
	sc.i += len(lit)
	return nil
}

func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
		i++
	}
	return i
}

func (sc *scanner) peek() byte {
	if sc.i < len(sc.data) {
		return sc.data[sc.i]
	}
	return 0
}

// kindOf names the JSON type of a value starting with c, or "" when no
// value starts with c.
func kindOf(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "number"
	}
	return ""
}

func (sc *scanner) syntax(i int, what string) *Error {
	return &Error{ReasonMalformed, fmt.Sprintf("syntax error at byte %d: %s", i, what)}
}

// unexpected reports the byte at i, or the end of input, as a syntax error.
func (sc *scanner) unexpected(i int, where string) *Error {
	if i >= len(sc.data) {
		return sc.syntax(i, "unexpected end of input "+where)
	}
	c := sc.data[i]
	if c >= 0x20 && c < 0x7f {
		return sc.syntax(i, fmt.Sprintf("invalid character %q %s", c, where))
	}
	return sc.syntax(i, fmt.Sprintf("invalid byte 0x%02x %s", c, where))
}
