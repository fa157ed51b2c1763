// The entry esbuild bundles into vendor/bpmn-auto-layout.min.js (window.BpmnAutoLayout).
export { layoutProcess } from 'bpmn-auto-layout';
