"""The README's table of measured figures is exactly what bench/readme_table.py renders from the raw
JSON in bench/results/: a figure there can always be traced to the samples it rests on."""

from bench import readme_table


def test_the_readme_table_is_the_one_rendered_from_bench_results():
    rendered = readme_table.render()
    assert rendered.count("\n") >= 3, "bench/results/ should give rows"
    in_readme = readme_table.readme_block(readme_table.README.read_text())
    assert in_readme == rendered, (
        "README.md is out of step with bench/results/: run `python -m bench.readme_table --write`"
    )


def test_every_row_names_the_file_it_came_from():
    for line in readme_table.render().splitlines()[2:]:
        assert "`bench/results/" in line, line
