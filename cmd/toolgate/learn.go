package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/learn/draft"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

const learnUsage = `usage: toolgate learn report -file learned.json [-o draft.yaml] [-json]

Prints what learning mode (server.learn) observed, and a policy draft from it: one tool per
learned route, with what was seen and # TODO: comments where a person must decide. The draft
passes toolgate check as written. -json prints the summary itself instead.
`

// runLearn runs "toolgate learn report".
func runLearn(args []string, stdout, stderr io.Writer) int {
	var file, out string
	var asJSON bool
	code, ok := parseSubcommand("learn", "report", "subcommand", learnUsage, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&file, "file", "", "the summary file server.learn.file names")
		fs.StringVar(&out, "o", "", "write the draft to this file (default: standard output)")
		fs.BoolVar(&asJSON, "json", false, "print the summary as JSON instead of the draft")
	})
	if !ok {
		return code
	}
	if file == "" {
		fmt.Fprintln(stderr, "toolgate learn report: -file is required")
		return 2
	}
	sum, err := learn.ReadSummary(file)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate learn report: %v\n", err)
		return 1
	}
	var text []byte
	if asJSON {
		text, err = json.MarshalIndent(sum, "", "  ")
		text = append(text, '\n')
	} else {
		var d *draft.Draft
		d, err = draft.Write(sum, draft.Options{Source: file})
		if d != nil {
			text = d.YAML
			for _, s := range d.Skipped {
				fmt.Fprintf(stderr, "toolgate learn report: not drafted: %s %s (%s): %s\n", s.Method, s.Path, s.Upstream, s.Reason)
			}
			if len(d.Env) > 0 {
				fmt.Fprintf(stderr, "toolgate learn report: the upstreams' credentials are read from %s; set them before toolgate check\n", strings.Join(d.Env, ", "))
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "toolgate learn report: %v\n", err)
		return 1
	}
	if err := writeOutput(out, text, stdout); err != nil {
		fmt.Fprintf(stderr, "toolgate learn report: %v\n", err)
		return 1
	}
	if out == "" {
		return 0
	}
	fmt.Fprintf(stderr, "toolgate learn report: wrote %s (%s); review its TODO comments, then run: toolgate check -config %s\n", out, sum, out)
	return 0
}

// learning is learning mode in a running toolgate: the learner, the save
// of its summary every save_interval and at shutdown, and GET /v1/learn.
// A nil *learning is learning mode off; every method allows it.
type learning struct {
	learner *learn.Learner
	logger  *slog.Logger
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// startLearning starts learning mode with the policy's server.learn, or
// returns nil when it is not set. An existing summary file is continued.
func startLearning(settings *policy.LearnSettings, logger *slog.Logger) (*learning, error) {
	if settings == nil {
		return nil, nil
	}
	l, err := learn.Open(*settings, learn.Options{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("server.learn: %w", err)
	}
	lg := &learning{learner: l, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	go every(l.Settings().SaveInterval, lg.stop, lg.done, lg.save)
	logger.Info("learning mode on", "file", settings.File, "summary", l.Summary().String())
	return lg, nil
}

func (lg *learning) save() {
	if err := lg.learner.Save(); err != nil {
		lg.logger.Warn("learning mode could not save its summary", "err", err.Error())
	}
}

// observer is the core's observer; nil when learning mode is off.
func (lg *learning) observer() proxy.Observer {
	if lg == nil {
		return nil
	}
	return lg.learner
}

// summaries is the learner, for the console; nil when learning mode is
// off.
func (lg *learning) summaries() *learn.Learner {
	if lg == nil {
		return nil
	}
	return lg.learner
}

// close stops the periodic save and saves the summary a last time.
func (lg *learning) close() {
	if lg == nil {
		return
	}
	lg.once.Do(func() {
		close(lg.stop)
		<-lg.done
		lg.save()
	})
}

// handler serves GET /v1/learn: the summary and the draft as JSON, or with
// ?format=yaml the draft alone, ready to save; nil when learning mode is
// off.
func (lg *learning) handler() http.Handler {
	if lg == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := lg.learner.Summary()
		d, err := draft.Write(sum, draft.Options{Source: "GET /v1/learn"})
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Query().Get("format") == "yaml" {
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(d.YAML)
			return
		}
		view := map[string]any{"summary": sum}
		if err != nil {
			view["draft_error"] = err.Error()
		} else {
			view["draft"] = string(d.YAML)
			view["skipped"] = d.Skipped
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(view)
	})
}
