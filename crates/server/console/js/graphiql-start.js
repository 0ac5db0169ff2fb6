// Starts GraphiQL on the vendored libraries, talking to this server over HTTP and WebSocket
// with the token the reader signed in with in the console (sessionStorage of this origin).
(function start() {
  'use strict';
  var token = window.sessionStorage.getItem('research-ledger.token');
  var headers = token ? {Authorization: 'Bearer ' + token} : {};
  var http = new URL('/graphql', window.location.href);
  var ws = new URL('/graphql/ws', window.location.href);
  ws.protocol = ws.protocol === 'https:' ? 'wss:' : 'ws:';
  var fetcher = window.GraphiQL.createFetcher({
    url: http.toString(),
    headers: headers,
    wsClient: window.graphqlWs.createClient({url: ws.toString(), connectionParams: headers}),
  });
  window.ReactDOM.createRoot(document.getElementById('graphiql')).render(
    window.React.createElement(window.GraphiQL, {
      fetcher: fetcher,
      defaultEditorToolsVisibility: true,
      defaultQuery: '{\n  tasks(first: 10) {\n    edges { node { id question status conclusion { stance confidence } } }\n  }\n}\n',
    }),
  );
}());
