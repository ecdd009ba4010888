"""``tern completion bash|zsh|fish``: a shell completion script made from the parser.

Generated, never written by hand, so a new command or option completes the day it is
added. The script carries the parser as a few shell lookup functions (the subcommands
and options of each command path, which options take a value, the values an option or
positional takes); one small driver per shell walks the words typed so far through
them. Nothing runs tern while completing, except for agent names (``tern run <TAB>``):
those come from ``tern completion agents``, which reads the config the command line
names with ``--config`` (or the one tern would use) and prints one name a line.

Values are words (choices), or a marker: ``@file`` (complete a path) or ``@agent``.
"""

from __future__ import annotations

import argparse
from typing import Any

from runtime.cli.common import Commands

__all__ = ["Spec", "spec", "script"]

SHELLS = ("bash", "zsh", "fish")
_FILE_POSITIONALS = {"path", "file", "manifest"}
_FILE_OPTIONS = {"config", "output"}


def add_commands(commands: Commands) -> None:
    completion = commands.add("completion", cmd_completion,
                              "print a shell completion script: source <(tern completion bash)")
    completion.add_argument("shell", choices=(*SHELLS, "agents"),
                            help="bash, zsh or fish ('agents' prints the configured agents' names, for the script)")


class Spec:
    """One command path's completions: ``subcommands``, ``options`` (every spelling),
    ``values[option]`` for options that take one, ``positionals`` in order."""

    def __init__(self) -> None:
        self.subcommands: list[str] = []
        self.options: list[str] = []
        self.values: dict[str, str] = {}
        self.positionals: list[str] = []
        self.helps: dict[str, str] = {}  # a subcommand's or option's help, for shells that show it (fish)


def _values(action: argparse.Action, positional: bool) -> str:
    if action.choices:
        return " ".join(str(choice) for choice in action.choices)
    if action.dest == "agent":
        return "@agent"
    files = _FILE_POSITIONALS if positional else _FILE_OPTIONS
    return "@file" if action.dest in files or (action.metavar or "") in ("PATH", "FILE") else ""


def spec(parser: argparse.ArgumentParser, path: str = "tern", into: dict[str, Spec] | None = None) -> dict[str, Spec]:
    """Every command path of ``parser`` ("tern", "tern config", "tern config check"...)."""
    into = {} if into is None else into
    node = into.setdefault(path, Spec())
    for action in parser._actions:  # argparse keeps no public list; this one has been stable for years
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                node.subcommands.append(name)
                node.helps[name] = _first_line(helps.get(name, ""))
                spec(sub, f"{path} {name}", into)
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            node.options += action.option_strings
            node.helps.update(dict.fromkeys(action.option_strings, _first_line(action.help or "")))
            if action.nargs != 0:
                for option in action.option_strings:
                    node.values[option] = _values(action, positional=False)
        else:
            node.positionals.append(_values(action, positional=True))
    return into


def _first_line(text: str) -> str:
    """A help text as one short line (argparse's %-placeholders left out)."""
    text = " ".join(text.replace("%(default)s", "").replace("%%", "%").split())
    return text if len(text) <= 60 else text[:57].rstrip(" ,;:(") + "..."


def _sh_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _lookups(specs: dict[str, Spec]) -> str:
    """The parser as POSIX-shell functions, shared by bash and zsh."""
    subs = "".join(f"    {_sh_quote(p)}) echo {_sh_quote(' '.join(s.subcommands))} ;;\n"
                   for p, s in specs.items() if s.subcommands)
    opts = "".join(f"    {_sh_quote(p)}) echo {_sh_quote(' '.join(s.options))} ;;\n" for p, s in specs.items())
    values = "".join(f"    {_sh_quote(p + '|' + o)}) echo {_sh_quote(v)}; return 0 ;;\n"
                     for p, s in specs.items() for o, v in s.values.items())
    positionals = "".join(f"    {_sh_quote(f'{p}|{i}')}) echo {_sh_quote(v)} ;;\n"
                          for p, s in specs.items() for i, v in enumerate(s.positionals) if v)
    return (
        f"_tern_subcommands() {{\n  case \"$1\" in\n{subs}  esac\n}}\n"
        f"_tern_options() {{\n  case \"$1\" in\n{opts}  esac\n}}\n"
        "# the values an option takes (empty: anything); fails for an option that takes none\n"
        f"_tern_values() {{\n  case \"$1|$2\" in\n{values}  esac\n  return 1\n}}\n"
        f"_tern_positional() {{\n  case \"$1|$2\" in\n{positionals}  esac\n}}\n"
        "# where the words before the cursor lead: sets _tern_path, _tern_npos (positionals\n"
        "# given), _tern_expect (the option whose value is being typed) and _tern_config\n"
        "_tern_walk() {\n"
        "  _tern_path=tern; _tern_npos=0; _tern_expect=; _tern_config=\n"
        "  local w\n"
        "  for w in \"$@\"; do\n"
        "    if [ -n \"$_tern_expect\" ]; then\n"
        "      [ \"$_tern_expect\" = --config ] && _tern_config=\"$w\"\n"
        "      _tern_expect=; continue\n"
        "    fi\n"
        "    case \"$w\" in\n"
        "      --*=*) ;;\n"
        "      -*) _tern_values \"$_tern_path\" \"$w\" >/dev/null && _tern_expect=\"$w\" ;;\n"
        "      *) case \" $(_tern_subcommands \"$_tern_path\") \" in\n"
        "           *\" $w \"*) _tern_path=\"$_tern_path $w\"; _tern_npos=0 ;;\n"
        "           *) _tern_npos=$((_tern_npos + 1)) ;;\n"
        "         esac ;;\n"
        "    esac\n"
        "  done\n"
        "}\n"
        "# what may come at the cursor: words, or @file, or @agent\n"
        "_tern_candidates() {\n"
        "  if [ -n \"$_tern_expect\" ]; then _tern_values \"$_tern_path\" \"$_tern_expect\"; return; fi\n"
        "  case \"$1\" in -*) _tern_options \"$_tern_path\"; return ;; esac\n"
        "  local subs; subs=\"$(_tern_subcommands \"$_tern_path\")\"\n"
        "  if [ -n \"$subs\" ]; then echo \"$subs\"; else _tern_positional \"$_tern_path\" \"$_tern_npos\"; fi\n"
        "}\n"
        "_tern_agents() {\n"
        "  if [ -n \"$_tern_config\" ]; then command tern completion agents --config \"$_tern_config\" 2>/dev/null\n"
        "  else command tern completion agents 2>/dev/null; fi\n"
        "}\n"
    )


_BASH = """_tern() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  _tern_walk "${COMP_WORDS[@]:1:COMP_CWORD-1}"
  local found; found="$(_tern_candidates "$cur")"
  case "$found" in
    @file) COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null ;;
    @agent) COMPREPLY=($(compgen -W "$(_tern_agents)" -- "$cur")) ;;
    *) COMPREPLY=($(compgen -W "$found" -- "$cur")) ;;
  esac
}
complete -F _tern tern
"""

_ZSH = """_tern() {
  local cur="${words[CURRENT]}"
  _tern_walk "${(@)words[2,CURRENT-1]}"
  local found; found="$(_tern_candidates "$cur")"
  case "$found" in
    @file) _files ;;
    @agent) compadd -- ${(f)"$(_tern_agents)"} ;;
    *) compadd -- ${=found} ;;
  esac
}
if [ "${funcstack[1]}" = _tern ]; then _tern "$@"; else compdef _tern tern; fi
"""


def _fish(specs: dict[str, Spec]) -> str:
    def words(items: Any) -> str:
        return " ".join(_sh_quote(str(item)) for item in items)

    subs = "".join(f"    case {_sh_quote(p)}\n      echo {words(s.subcommands)}\n"
                   for p, s in specs.items() if s.subcommands)
    opts = "".join(f"    case {_sh_quote(p)}\n      echo {words(s.options)}\n" for p, s in specs.items())
    values = "".join(f"    case {_sh_quote(p + '|' + o)}\n      echo {_sh_quote(v)}; return 0\n"
                     for p, s in specs.items() for o, v in s.values.items())
    positionals = "".join(f"    case {_sh_quote(f'{p}|{i}')}\n      echo {_sh_quote(v)}\n"
                          for p, s in specs.items() for i, v in enumerate(s.positionals) if v)
    helps = "".join(f"    case {_sh_quote(p)}\n" + "".join(f"      printf '%s\\t%s\\n' {_sh_quote(w)} {_sh_quote(h)}\n"
                                                        for w, h in s.helps.items())
                    for p, s in specs.items() if s.helps)
    return (
        f"function __tern_described\n  switch $argv[1]\n{helps}  end\nend\n"
        f"function __tern_subcommands\n  switch $argv[1]\n{subs}  end\nend\n"
        f"function __tern_options\n  switch $argv[1]\n{opts}  end\nend\n"
        f"function __tern_values\n  switch \"$argv[1]|$argv[2]\"\n{values}  end\n  return 1\nend\n"
        f"function __tern_positional\n  switch \"$argv[1]|$argv[2]\"\n{positionals}  end\nend\n"
        """function __tern_complete
  set -l typed (commandline -opc)
  set -l cur (commandline -ct)
  set -l path tern
  set -l npos 0
  set -l expect ''
  set -l config ''
  for w in $typed[2..-1]
    if test -n "$expect"
      test "$expect" = --config; and set config $w
      set expect ''
      continue
    end
    switch $w
      case '--*=*'
      case '-*'
        if __tern_values "$path" $w >/dev/null
          set expect $w
        end
      case '*'
        if contains -- $w (string split ' ' (__tern_subcommands "$path"))
          set path "$path $w"
          set npos 0
        else
          set npos (math $npos + 1)
        end
    end
  end
  set -l found
  if test -n "$expect"
    set found (__tern_values "$path" $expect)
  else if string match -q -- '-*' $cur
    set found (__tern_options "$path")
  else
    set found (__tern_subcommands "$path")
    test -z "$found"; and set found (__tern_positional "$path" $npos)
  end
  switch "$found"
    case @file
      __fish_complete_path $cur
    case @agent
      if test -n "$config"
        command tern completion agents --config $config 2>/dev/null
      else
        command tern completion agents 2>/dev/null
      end
    case '*'
      set -l described (__tern_described "$path")
      for word in (string split ' ' -- $found | string match -v '')
        # a subcommand or option with its help, a value as it is
        set -l line (string match -- "$word"\\t"*" $described)
        if test -n "$line"
          echo $line[1]
        else
          echo $word
        end
      end
  end
end
complete -c tern -f -a '(__tern_complete)'
"""
    )


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    specs = spec(parser)
    header = f"# tern {shell} completion, generated from its command line parser: tern completion {shell}\n"
    if shell == "bash":
        return header + _lookups(specs) + _BASH
    if shell == "zsh":
        return "#compdef tern\n" + header + _lookups(specs) + _ZSH
    return header + _fish(specs)


def cmd_completion(args: argparse.Namespace) -> int:
    if args.shell == "agents":
        from runtime.config import load_config

        for agent in load_config(getattr(args, "config", None)).config.agents:
            print(agent.name)
        return 0
    from runtime.cli import build_parser

    print(script(args.shell, build_parser()), end="")
    return 0
