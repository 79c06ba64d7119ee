"""`key=value` overrides read by Hydra's own parser (app/overrides.py): keys named through Hydra's
prefixes, the last value winning with its quotes off, and quoting where Hydra would refuse or
misread a value as typed."""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser

from app.overrides import as_dict, key_of, parsed, quote_override, quoted, value_of


def test_keys_values_and_flags():
    assert parsed("+data.test_path='/x=y'") == ("data.test_path", "'/x=y'")  # as typed
    assert parsed("data@val.path=/x") == ("data", "/x")  # Hydra's package syntax: the key is the group's
    assert parsed("~trainer.callbacks") is None and parsed("--cfg=job") is None and parsed("-m") is None
    assert parsed("a=[1,") is None and key_of("a=[1,") == "a"  # Hydra's to refuse
    assert key_of("++queue.workers=3") == "queue.workers" and key_of("--cfg=job") == "--cfg"
    argv = ["resume=a", "queue.workers=2", "+resume='/runs/my run'", "-m"]
    assert value_of(argv, "resume") == "/runs/my run"  # the last, its Hydra quotes off
    assert value_of(argv, "queue.max_size") is None
    assert value_of(["x=\"it\\\"s\""], "x") == 'it"s'
    assert value_of(["model.name=a,b", "n=7"], "model.name") == "a,b" and value_of(["n=7"], "n") == "7"  # as typed
    assert as_dict(["+a=1", "b=2", "a=3", "-m", "~c"]) == {"a": "3", "b": "2"}


def test_quoting_gives_what_hydra_parses_back():
    parser = OverridesParser.create()
    for value in ("/données/chat.jpg", "it's mine", "~/photos", "/p/(1).jpg", "a#b", " lead", "/x=y", "{}.jpg"):
        arg = quote_override(f"input={value}")
        assert arg != f"input={value}"
        assert parser.parse_override(arg).value() == value
    for untouched in ("queue.workers=choice(1,2)", "data.image_size=[32, 32]", "x='a b'", "-m", "plain=ascii",
                      "input=/runs/my run", "n=7", "b=true", "s=a,b", "p=${oc.env:HOME}", "~trainer.callbacks",
                      "d={a: 1}"):
        assert quote_override(untouched) == untouched
    # negative control: unquoted, Hydra's grammar refuses a non-ASCII value
    try:
        parser.parse_override("input=/données/chat.jpg")
        refused = False
    except Exception:  # noqa: BLE001 - Hydra's own OverrideParseException
        refused = True
    assert refused and quoted("a'b ${x}") == "'a\\'b \\${x}'"  # no interpolation inside
