"""The import guard: a clear one-line error for numpy >= 1.24 or a missing MXNet."""
from conftest import run_python


def test_numpy_2_is_refused_before_mxnet_is_imported():
    proc = run_python(
        "import sys, numpy\n"
        "numpy.__version__ = '2.1.0'\n"
        "try:\n"
        "    import mxmixed\n"
        "except ImportError as err:\n"
        "    print('MXNET_IMPORTED=%s' % ('mxnet' in sys.modules))\n"
        "    print('MESSAGE=' + str(err))\n")
    assert proc.returncode == 0, proc.stderr
    assert "MXNET_IMPORTED=False" in proc.stdout
    message = proc.stdout.split("MESSAGE=", 1)[1].strip()
    assert "\n" not in message
    assert "numpy==1.23.5" in message and "2.1.0" in message


def test_numpy_1_23_is_accepted():
    proc = run_python("import mxmixed; print(mxmixed.__version__)")
    assert proc.returncode == 0, proc.stderr


def test_missing_mxnet_names_the_extra_to_install():
    proc = run_python(
        "import sys\n"
        "sys.modules['mxnet'] = None\n"
        "try:\n"
        "    import mxmixed\n"
        "except ImportError as err:\n"
        "    print('MESSAGE=' + str(err))\n")
    assert proc.returncode == 0, proc.stderr
    message = proc.stdout.split("MESSAGE=", 1)[1].strip()
    assert "\n" not in message
    assert "-e '.[cpu]'" in message and "-e '.[cu112]'" in message
