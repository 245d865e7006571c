"""The `cdd` command line (`app.main`): thin commands over the library, one responsibility a
module: `app` the Typer app and its small commands, `sampling` `cdd molecules` and `cdd
generate`, `listings` the `ls` commands, `train` `cdd train ...` (its options made from
config dataclasses by `config_options`), `options` the options the commands share, `flags`
flags -> spec, `guard` errors -> one line and an exit code (and torch's threads), `progress`
the Rich displays (`projection_news`: the projection's row in words), `terminal` the one
console on stderr, `help` the help's conventions.
"""
