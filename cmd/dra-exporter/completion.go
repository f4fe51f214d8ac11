package main

// Shell completion. Each command parses its arguments with a kingpin
// Application of its own (cli.go), so kingpin's --completion-script-bash of
// one of them would name "dra-exporter serve" (a function name with a
// space: not valid bash) and complete one command's flags only. The binary
// answers the script and the completion requests itself: the command names
// for the first word, and the command's own kingpin completion (its flags,
// their enum values) after it.

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// bashCompletionScript is kingpin's bash completion script for the binary
// named name: bash calls "name --completion-bash WORDS..." for each
// completion.
func bashCompletionScript(name string) string {
	fn := "_" + regexp.MustCompile(`[^A-Za-z0-9_]`).ReplaceAllString(name, "_") + "_bash_autocomplete"
	return fmt.Sprintf(`# bash completion for %[1]s: source <(%[1]s --completion-script-bash)
%[2]s() {
    local cur opts
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    opts=$( "${COMP_WORDS[0]}" --completion-bash "${COMP_WORDS[@]:1:$COMP_CWORD}" 2>/dev/null )
    COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
    return 0
}
complete -F %[2]s -o default %[1]s
`, name, fn)
}

// complete prints the completions of words (the words typed after the
// program, the last one being completed): command names for the first
// word, else the command's own. defaultCmd takes flags typed without a
// command.
func complete(prog string, cmds []command, defaultCmd string, words []string, stdout, stderr io.Writer) int {
	if len(words) <= 1 && (len(words) == 0 || !strings.HasPrefix(words[0], "-")) {
		names := []string{"help"}
		for _, c := range cmds {
			names = append(names, c.name)
		}
		fmt.Fprintln(stdout, strings.Join(names, "\n"))
		return 0
	}
	name, rest := words[0], words[1:]
	if strings.HasPrefix(name, "-") {
		name, rest = defaultCmd, words
	}
	for _, c := range cmds {
		if c.name == name {
			// kingpin writes the completions of a command's flags to the
			// process' standard output.
			return c.run(prog+" "+c.name, append([]string{"--completion-bash"}, rest...), stdout, stderr)
		}
	}
	return 0
}
