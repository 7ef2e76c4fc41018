// Package yamlnode is what chatpulse's YAML files (the throttle policies,
// the event mappings) share in reading them node by node, so that every
// error can name the file, the line and the field: following aliases, and
// putting the file's name in front of a syntax error.
package yamlnode

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Deref follows aliases (*anchor) to the node they stand for.
func Deref(n *yaml.Node) *yaml.Node {
	for range 100 {
		if n.Kind != yaml.AliasNode || n.Alias == nil {
			break
		}
		n = n.Alias
	}
	return n
}

var line = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Error puts the file name in front of a YAML syntax error, with its line
// in the file:line form of the other errors.
func Error(file string, err error) error {
	if m := line.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s:%s: %s", file, m[1], m[2])
	}
	return fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
}
