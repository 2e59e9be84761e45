// npdregexp applies kernel-log rule patterns the way node-problem-detector's system-log monitor does
// (kubernetes/node-problem-detector pkg/systemlogmonitor/log_buffer.go CompilePattern and Match, commit
// 6632ca67148f7a23df9cdbd98d9e89b388561a3a): Go regexp, the pattern with `\z` appended, searched in the buffered
// log lines joined by "\n". It reads {"patterns": [...], "lines": [...]} on stdin and writes, per pattern, whether it
// compiles, whether the appended anchor binds every top-level alternative (NPD's own tree comparison), and whether
// the pattern can only match inside one line (no newline-matching piece, no start-of-text anchor; a start-of-line
// anchor (?m:^) is allowed); and, per line, the patterns whose NPD match on that line (the newest in the buffer)
// succeeds. tests/test_rules.py compares that with Python's re.match.
package main

import (
	"encoding/json"
	"os"
	"regexp"
	"regexp/syntax"
)

type input struct {
	Patterns []string `json:"patterns"`
	Lines    []string `json:"lines"`
}

type pattern struct {
	Error       string `json:"error,omitempty"`
	AnchorBinds bool   `json:"anchor_binds"`
	OneLine     bool   `json:"one_line"`
	OneLineWhy  string `json:"one_line_why,omitempty"`
}

type output struct {
	Patterns []pattern `json:"patterns"`
	Matches  [][]int   `json:"matches"`
}

// oneLine is NPD's isLastLineOnly, except that a start-of-line anchor is accepted: in the joined buffer it marks
// the start of a line, as ^ marks the start of the one message nodesleuth matches.
func oneLine(re *syntax.Regexp) (bool, string) {
	switch re.Op {
	case syntax.OpAnyChar:
		return false, "(?s). matches a newline"
	case syntax.OpBeginText, syntax.OpEndLine:
		return false, "a text anchor (\\A, or $ under (?m)) means the whole buffer"
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if r == '\n' {
				return false, "a literal newline"
			}
		}
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return false, "a character class that contains newline: " + re.String()
			}
		}
	}
	for _, sub := range re.Sub {
		if ok, why := oneLine(sub); !ok {
			return false, why
		}
	}
	return true, ""
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	out := output{Patterns: make([]pattern, len(in.Patterns)), Matches: make([][]int, len(in.Lines))}
	compiled := make([]*regexp.Regexp, len(in.Patterns))
	for i, expr := range in.Patterns {
		p := &out.Patterns[i]
		if _, err := regexp.Compile(expr); err != nil {
			p.Error = err.Error()
			continue
		}
		anchored := expr + `\z`
		compiled[i] = regexp.MustCompile(anchored)
		tree, err1 := syntax.Parse(anchored, syntax.Perl)
		grouped, err2 := syntax.Parse(`(?:`+expr+`)\z`, syntax.Perl)
		p.AnchorBinds = err1 == nil && err2 == nil && tree.Equal(grouped)
		if err1 == nil {
			p.OneLine, p.OneLineWhy = oneLine(tree)
		}
	}
	for j, line := range in.Lines {
		out.Matches[j] = []int{}
		for i, re := range compiled {
			if re != nil && re.FindStringIndex(line) != nil {
				out.Matches[j] = append(out.Matches[j], i)
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
