"""Command-line interface (placeholder until the commands land)."""
import click


@click.group()
def main():
    """colls: collective algorithm compiler."""
