"""Setup for gpurl, driven by settings.ini (the nbdev 2 layout)."""
from configparser import ConfigParser
import setuptools, shlex

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()
extras = {'dev': shlex.split(cfg.get('dev_requirements', '')),
          'parquet': ['pyarrow'],
          'gym': ['gymnasium'],
          # peer libraries the tests and benchmarks compare with (quantstats: tear sheets; SB3 + gym-anytrading: the
          # PPO baseline; ncps: liquid networks; pytorch-forecasting: the TFT; finrl: its PortfolioOptimizationEnv, timed beside
          # gpurl's PortfolioEnv)
          'peers': ['quantstats', 'stable-baselines3', 'gym-anytrading', 'ncps==1.0.1', 'pytorch-forecasting==1.8.0', 'finrl==0.3.7'],
          # experiment trackers (gpurl_train --log) and exported policies (gpurl_export)
          'tensorboard': ['tensorboard'],
          'mlflow': ['mlflow-skinny>=3', 'sqlalchemy', 'alembic'],
          'export': ['onnx', 'onnxscript', 'onnxruntime'],
          # trailing-window minimum-variance and maximum-Sharpe baselines of many-asset runs (gpurl.envs.allocators)
          'portfolio': ['skfolio>=1.12'],
          }

setuptools.setup(
    name=cfg['lib_name'], version=cfg['version'], description=cfg['description'],
    keywords=cfg['keywords'], author=cfg['author'], author_email=cfg['author_email'],
    license='Apache Software License 2.0',
    classifiers=['Development Status :: ' + statuses[int(cfg['status']) - 1],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'License :: OSI Approved :: Apache Software License',
                 'Natural Language :: ' + cfg['language'].title()] +
                ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(cfg['min_python']):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['gpurl', 'gpurl.*']),
    include_package_data=True,
    install_requires=shlex.split(cfg.get('requirements', '')),
    extras_require=extras,
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
    })
