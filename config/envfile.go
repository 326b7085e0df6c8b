package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// maxEnvFileBytes bounds an env file: it holds variables, not data.
const maxEnvFileBytes = 1 << 20

// ReadEnvFile reads a dotenv-style file of variables for ${VAR}
// (toolgate check -env-file, toolgate try -env-file): one NAME=VALUE a
// line, optionally after "export "; blank lines and lines starting with #
// are skipped. A value is taken as written, without surrounding white
// space, up to a " #" that starts a comment; in single quotes it is
// literal; in double quotes \n, \t, \", \\ and \$ are escapes. A later line
// sets a name again. Errors name the file and line.
func ReadEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > maxEnvFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxEnvFileBytes)
	}
	return parseEnvFile(path, data)
}

func parseEnvFile(path string, data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxEnvFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "\ufeff"))
		if line == "" || line[0] == '#' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || !validEnvName(name) {
			return nil, fmt.Errorf("%s:%d: want NAME=VALUE", path, n)
		}
		v, err := envValue(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", path, n, name, err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// envValue reads the value part of a line (trimmed).
func envValue(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	switch q := v[0]; q {
	case '\'':
		end := strings.IndexByte(v[1:], '\'')
		if end < 0 {
			return "", fmt.Errorf("unterminated single quote")
		}
		return v[1 : 1+end], checkRest(v[2+end:])
	case '"':
		var b strings.Builder
		for i := 1; i < len(v); i++ {
			switch c := v[i]; c {
			case '"':
				return b.String(), checkRest(v[i+1:])
			case '\\':
				if i+1 == len(v) {
					return "", fmt.Errorf("unterminated double quote")
				}
				i++
				switch e := v[i]; e {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case '"', '\\', '$':
					b.WriteByte(e)
				default:
					b.WriteByte('\\')
					b.WriteByte(e)
				}
			default:
				b.WriteByte(c)
			}
		}
		return "", fmt.Errorf("unterminated double quote")
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	if i := strings.Index(v, "\t#"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v), nil
}

// checkRest allows only white space and a comment after a quoted value.
func checkRest(rest string) error {
	rest = strings.TrimSpace(rest)
	if rest != "" && rest[0] != '#' {
		return fmt.Errorf("unexpected text after the quoted value")
	}
	return nil
}

// EnvLookup resolves ${VAR} from files first (later files win), then from
// lookup (nil: none).
func EnvLookup(files []map[string]string, lookup func(string) (string, bool)) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := len(files) - 1; i >= 0; i-- {
			if v, ok := files[i][name]; ok {
				return v, true
			}
		}
		if lookup == nil {
			return "", false
		}
		return lookup(name)
	}
}
