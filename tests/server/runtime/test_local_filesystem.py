"""``file:`` through tierlake's LocalFileSystem (server/runtime/java/
LocalFileSystem.java): the server's Spark, and so Iceberg, writes local files
with the modes Hadoop asks for, set without a ``chmod`` process."""

from __future__ import annotations

import os
import stat
import uuid

import pytest

pytestmark = pytest.mark.integration


def hadoop_fs(spark, path):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm.org.apache.hadoop.fs.Path(path.as_uri()).getFileSystem(conf), jvm


def test_file_scheme_is_tierlakes(spark, tmp_path):
    fs, _ = hadoop_fs(spark, tmp_path)
    assert fs.getClass().getName() == "io.tierlake.internal.LocalFileSystem"
    assert fs.getRawFileSystem().getClass().getName() == "io.tierlake.internal.LocalFileSystem$Raw"


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o755, 0o711, 0o070, 0o007, 0o000])
def test_modes_are_set_as_hadoop_asks(spark, tmp_path, mode):
    fs, jvm = hadoop_fs(spark, tmp_path)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    directory = tmp_path / f"d{mode:o}"
    assert fs.mkdirs(jvm.org.apache.hadoop.fs.Path(directory.as_uri()), permission)
    file = tmp_path / f"f{mode:o}"
    out = fs.create(jvm.org.apache.hadoop.fs.Path(file.as_uri()), permission, True, 4096, 1, 1 << 20, None)
    out.write(bytearray(b"x"))
    out.close()
    umask = int(spark.sparkContext._jsc.hadoopConfiguration().get("fs.permissions.umask-mode", "022"), 8)
    assert stat.S_IMODE(directory.stat().st_mode) == mode & ~umask  # mkdirs applies the umask too
    assert stat.S_IMODE(file.stat().st_mode) == mode & ~umask
    assert (tmp_path / f".f{mode:o}.crc").exists()  # checksums kept, as with Hadoop's own


def test_iceberg_tables_write_through_it(spark):
    name = f"default.localfs_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING iceberg")
    try:
        spark.sql(f"INSERT INTO {name} VALUES (1), (2)")
        assert sorted(r.id for r in spark.table(name).collect()) == [1, 2]
        files = [r.file_path for r in spark.sql(f"SELECT file_path FROM {name}.files").collect()]
        path = files[0].removeprefix("file:")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    finally:
        spark.sql(f"DROP TABLE {name} PURGE")
