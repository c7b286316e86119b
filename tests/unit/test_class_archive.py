"""The class archive's switch: the options that start a local session from it, only when it is there and on."""

from sensorcep.local import class_archive


def test_a_session_starts_from_the_archive_only_when_it_is_there_and_not_switched_off(tmp_path, monkeypatch):
    archive = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(class_archive, "ARCHIVE", archive)
    monkeypatch.delenv(class_archive.SWITCH_ENV, raising=False)
    assert class_archive.java_options() == "", "no archive: the JVM's own start"
    archive.write_bytes(b"archive")
    options = class_archive.java_options()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xshare:auto" in options, "an archive of another JDK is ignored, not an error"
    monkeypatch.setenv(class_archive.SWITCH_ENV, "off")
    assert class_archive.java_options() == ""


def test_the_archive_is_stale_once_its_key_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(class_archive, "ARCHIVE", tmp_path / "spark-classes.jsa")
    monkeypatch.setattr(class_archive, "KEY", tmp_path / "spark-classes.key")
    monkeypatch.setattr(class_archive, "key", lambda: "jdk 17.0.15, pyspark 4.1.4")
    assert not class_archive.is_current(), "none built yet"
    class_archive.ARCHIVE.write_bytes(b"archive")
    class_archive.KEY.write_text("jdk 17.0.15, pyspark 4.1.4")
    assert class_archive.is_current()
    monkeypatch.setattr(class_archive, "key", lambda: "jdk 21.0.5, pyspark 4.1.4")
    assert not class_archive.is_current(), "another JDK: make jars builds it again"


def test_a_path_with_a_space_gets_no_archive_rather_than_a_jvm_that_cannot_start(tmp_path, monkeypatch, capsys):
    """Spark's launcher splits the driver's JVM options on spaces: such a path would break every session."""
    archive = tmp_path / "my checkout" / "spark-classes.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    monkeypatch.setattr(class_archive, "ARCHIVE", archive)
    monkeypatch.setattr(class_archive, "KEY", archive.with_suffix(".key"))  # none: the archive is not current
    monkeypatch.delenv(class_archive.SWITCH_ENV, raising=False)
    assert class_archive.java_options() == ""
    assert class_archive.build(quiet=True) is False
    assert "holds a space" in capsys.readouterr().out


def test_make_jars_builds_the_archive_and_make_tests_jars_only_fetch(monkeypatch, capsys):
    from sensorcep import __main__ as cli

    built = []
    monkeypatch.setattr(cli.jars, "fetch", lambda: False)
    monkeypatch.setattr(cli.class_archive, "build", lambda: built.append(True))
    cli.main(["jars"])
    assert built == [True], "make jars, make demo, make extended: the jars and the archive"
    cli.main(["jars", "--no-class-archive"])
    assert built == [True], "make test: the jars only"
    assert "up to date" in capsys.readouterr().out
