/**
 * The Scheduling Workbench in JupyterLab: a command ("Open Scheduling Workbench"), a Launcher
 * item and a command-palette entry that open the app in a main-area tab.
 *
 * The app itself is served by `workbench serve`, started on demand by jupyter-server-proxy
 * under `<base_url>workbench/` (see workbench/ui/jupyter.py); this extension only frames it.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  IFrame,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ILauncher } from '@jupyterlab/launcher';
import { LabIcon } from '@jupyterlab/ui-components';

import workbenchSvg from '../style/workbench.svg';

const COMMAND = 'workbench:open';
const TITLE = 'Scheduling Workbench';

const workbenchIcon = new LabIcon({
  name: 'workbench-launcher:icon',
  svgstr: workbenchSvg
});

function createPanel(): MainAreaWidget<IFrame> {
  const frame = new IFrame({
    sandbox: [
      'allow-scripts',
      'allow-same-origin',
      'allow-forms',
      'allow-popups',
      'allow-downloads'
    ]
  });
  // The proxy starts the app on first use (3-8 s of an empty frame): say so until its page
  // has loaded; the page then shows its own spinner until the console has rendered.
  const loading = document.createElement('div');
  loading.className = 'jp-WorkbenchPanel-loading';
  const spinner = document.createElement('div');
  spinner.className = 'jp-WorkbenchPanel-spinner';
  const text = document.createElement('div');
  text.textContent = 'Starting the Scheduling Workbench…';
  loading.append(spinner, text);
  frame.node.appendChild(loading);
  frame.node
    .querySelector('iframe')
    ?.addEventListener('load', () => loading.remove(), { once: true });
  frame.url = URLExt.join(PageConfig.getBaseUrl(), 'workbench/');
  const panel = new MainAreaWidget({ content: frame });
  panel.id = 'workbench-app';
  panel.title.label = TITLE;
  panel.title.icon = workbenchIcon;
  panel.title.closable = true;
  panel.addClass('jp-WorkbenchPanel');
  return panel;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'workbench-launcher:plugin',
  description: 'Open the Scheduling Workbench in a JupyterLab tab.',
  autoStart: true,
  optional: [ILauncher, ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    launcher: ILauncher | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const tracker = new WidgetTracker<MainAreaWidget<IFrame>>({
      namespace: 'workbench'
    });
    app.commands.addCommand(COMMAND, {
      label: TITLE,
      caption: 'Open the Scheduling Workbench (cluster, jobs, forecasts, engines)',
      icon: workbenchIcon,
      execute: () => {
        const open = tracker.currentWidget;
        if (open && !open.isDisposed) {
          app.shell.activateById(open.id);
          return open;
        }
        const panel = createPanel();
        void tracker.add(panel);
        app.shell.add(panel, 'main');
        app.shell.activateById(panel.id);
        return panel;
      }
    });
    if (launcher) {
      launcher.add({ command: COMMAND, category: 'Other', rank: 0 });
    }
    if (palette) {
      palette.addItem({ command: COMMAND, category: 'Scheduling Workbench' });
    }
    if (restorer) {
      void restorer.restore(tracker, { command: COMMAND, name: () => 'workbench' });
    }
  }
};

export default plugin;
