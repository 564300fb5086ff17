"""``revivify completion bash|zsh``: a shell completion script, generated from the command
table (main.py COMMAND_TABLE) and the commands' own parsers.

The words a shell completes, at each position of ``revivify NOUN VERB ...``:

* position 1: the nouns (COMMAND_TABLE), ``--help``, ``--version``;
* position 2: the noun's verbs (its `Verb` rows);
* a word that starts with ``-``, anywhere after: the flags of that noun's verb (or of the
  noun, for one without verbs: ``ksck``, ``prove``, ``explore``);
* anything else: file names (``--root DIR``, ``--fs-root DIR``, trace paths).

Nouns and verbs are the table's. The flags are the parsers' own: each command builds its
argparse parser inside the function that runs it (and a noun with subcommands one parser
with a subparser per verb), so `flags_of` runs each noun's and each verb's function with
argparse's parsing replaced by a stop that hands back the parser it was asked to parse
with (`_captured_parser`): no command runs, nothing is printed, and a flag added to a
command is in the next script generated without any list to update. The commands whose
module needs an optional extra that is missing (the checker's: ``prove``, ``explore``,
``trace``, ``history``) keep their verbs and lose their flags.

The script is static: generating it imports every command's module (the servers' and the
checker's too, for ``tserver run``'s and ``trace check``'s flags: a second or more), which a
Tab press then never pays. Write it once to a file the shell reads at start
(``revivify completion bash > ~/.local/share/bash-completion/completions/revivify``) rather
than ``eval`` it in every new shell. zsh runs the same function through its bash
emulation (``bashcompinit``), after ``compinit``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, Protocol

SHELLS = ("bash", "zsh")


class Verb(Protocol):
    """A row of main.py's command table, as read here (main.py imports this module)."""

    @property
    def name(self) -> str: ...
    @property
    def function(self) -> str: ...


class Noun(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def verbs(self) -> Sequence[Verb]: ...


Runner = Callable[[str, str], Callable[[list[str]], int]]
"""main.py's `_function`: (module name, function name) -> the function."""


class _Parsed(Exception):
    """Raised where argparse would parse: the parser it was called on."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@contextlib.contextmanager
def _captured_parser() -> Iterator[None]:
    """argparse's parse_known_args (which parse_args calls too) stops at once, raising
    _Parsed with its parser; put back on the way out. What the command prints before it
    parses (nothing, in the commands of the table) is dropped."""
    original = argparse.ArgumentParser.parse_known_args

    def stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        raise _Parsed(self)

    argparse.ArgumentParser.parse_known_args = stop  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]


def _parser_of(function: Callable[[list[str]], int], argv: list[str]
               ) -> argparse.ArgumentParser | None:
    """The parser `function` builds for `argv`; None if it got no parser that far (a
    missing extra, or no argparse parser at all)."""
    try:
        with _captured_parser():
            function(argv)
    except _Parsed as parsed:
        return parsed.parser
    except Exception:  # MissingExtra (main.py), ImportError: no flags for this one
        return None
    return None


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


def _subparser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser:
    """The subparser of `verb` when `parser` has subcommands, else `parser` itself."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and verb in action.choices:
            chosen: argparse.ArgumentParser = action.choices[verb]
            return chosen
    return parser


def flags_of(table: Sequence[Noun], function_of: Runner) -> dict[tuple[str, str], list[str]]:
    """(noun, verb) -> that command's flags ("" for the verb of a noun without verbs),
    from the parsers the commands build (module docstring). A command with no parser to
    read is left out."""
    found: dict[tuple[str, str], list[str]] = {}
    for noun in table:
        module_name, _, function = noun.target.partition(":")
        if noun.name == "completion":
            continue  # this module: its one argument is the shell
        if function:  # one function parses every verb: a subparser each, or none
            parser = _parser_of(function_of(module_name, function), [])
            if parser is None:
                continue
            if not noun.verbs:
                found[noun.name, ""] = _options(parser)
            for verb in noun.verbs:
                found[noun.name, verb.name] = _options(_subparser(parser, verb.name))
            continue
        for verb in noun.verbs:
            # A function that parses several verbs (master_main) is given the verb too.
            takes_verb = sum(v.function == verb.function for v in noun.verbs) > 1
            parser = _parser_of(function_of(module_name, verb.function),
                                [verb.name] if takes_verb else [])
            if parser is not None:
                found[noun.name, verb.name] = _options(_subparser(parser, verb.name))
    return found


BASH_FUNCTION = """_revivify() {
    local cur=${COMP_WORDS[COMP_CWORD]} words=""
    local noun=${COMP_WORDS[1]} verb=${COMP_WORDS[2]}
    if [[ $COMP_CWORD -eq 1 ]]; then
        words="%(nouns)s"
    elif [[ $cur == -* ]]; then
        case "$noun/$verb" in
%(flags)s
        esac
    elif [[ $COMP_CWORD -eq 2 ]]; then
        case "$noun" in
%(verbs)s
        esac
    fi
    if [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -F _revivify revivify
"""

HEADERS: Mapping[str, str] = {
    "bash": """# bash completion for revivify, generated by 'revivify completion bash' from its
# command table and its commands' parsers. Install it once:
#   revivify completion bash > ~/.local/share/bash-completion/completions/revivify
# (or source it from ~/.bashrc; 'eval "$(revivify completion bash)"' works too, but
# generating it imports every command, a second or more at each shell's start).
""",
    "zsh": """# zsh completion for revivify, generated by 'revivify completion zsh' from its
# command table and its commands' parsers: the bash function, through zsh's bash
# emulation. Install it once, to a file ~/.zshrc sources after 'compinit':
#   revivify completion zsh > ~/.revivify-completion.zsh
autoload -U +X bashcompinit && bashcompinit
""",
}


def script(shell: str, table: Sequence[Noun], function_of: Runner) -> str:
    """The completion script for `shell` (one of SHELLS)."""
    flags = flags_of(table, function_of)
    cases = []
    for noun in table:
        verbs = [verb.name for verb in noun.verbs] or [""]
        for verb in verbs:
            if (noun.name, verb) in flags:
                pattern = f'"{noun.name}/{verb}"' if verb else f'"{noun.name}/"*'
                cases.append(f'            {pattern}) words="{" ".join(flags[noun.name, verb])}"'
                             " ;;")
        if noun.verbs:  # flags before the verb: the noun's own --help
            cases.append(f'            "{noun.name}/"*) words="-h --help" ;;')
    verb_cases = [f'            "{noun.name}") words="{" ".join(v.name for v in noun.verbs)}'
                  ' --help" ;;' for noun in table if noun.verbs]
    function = BASH_FUNCTION % {
        "nouns": " ".join([noun.name for noun in table] + ["--help", "--version"]),
        "flags": "\n".join(cases), "verbs": "\n".join(verb_cases)}
    return HEADERS[shell] + function


__all__ = ["SHELLS", "flags_of", "script"]
